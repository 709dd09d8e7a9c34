#!/usr/bin/env bash
# Derive the image every lab node and Molecule instance starts from: the cached debootstrap build
# (build.sh) with its package lists emptied and the lists directory's time set to now, as if the image had
# been built seconds ago. A cached image can then never hide a role that trusts a fresh-looking lists
# directory (apt's cache_valid_time): every test run, whatever the age of the cache, starts where a
# freshly built golden image does. Tags and prints gpulab-node:latest; costs about two seconds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=${LAB_IMAGE_REPO:-gpulab-node}
base=$("$here/build.sh")
cid=$(docker create --label gpulab.fresh=1 "$base" /bin/sh -c \
  'rm -rf /var/lib/apt/lists/* /var/lib/apt/periodic/update-success-stamp && touch /var/lib/apt/lists')
trap 'docker rm -f "$cid" >/dev/null 2>&1' EXIT
docker start -a "$cid" >&2
docker commit --change 'CMD ["/sbin/init"]' --change 'LABEL gpulab.fresh=1' "$cid" "$repo:latest" >/dev/null
# Earlier derived images lose their tag; remove those no container uses any more (older than an hour: a
# scenario running beside this one may be starting containers from the one tagged a moment ago).
docker image prune -f --filter label=gpulab.fresh=1 --filter until=1h >/dev/null
echo "$repo:latest"
