#!/usr/bin/env bash
# Derive the image every lab node and Molecule instance starts from: the cached debootstrap build
# (build.sh) with its package lists emptied and the lists directory's time set to now, as if the image had
# been built seconds ago. A cached image can then never hide a role that trusts a fresh-looking lists
# directory (apt's cache_valid_time): every test run, whatever the age of the cache, starts where a
# freshly built golden image does. The lab-only files of overlay/ go in too: dpkg's unsafe-io setting and
# the bytecode cache of Ansible's module payloads. Costs about two seconds.
# Usage: fresh.sh [--keep] [TAG]   derives TAG (default gpulab-node:latest, what Molecule's instances start
#   from) and prints it. --keep prints TAG without deriving a new one when it exists: the lab's image
#   (gpulab-node:lab) is derived once per lab, when it is brought up, so that re-running `make lab` keeps
#   its containers; make lab-down removes it. Scenarios running beside the lab never move the lab's tag.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
keep=false
if [ "${1:-}" = "--keep" ]; then keep=true; shift; fi
tag=${1:-${LAB_IMAGE_REPO:-gpulab-node}:latest}
if $keep && docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi
base=$("$here/build.sh")
cid=$(docker create --label gpulab.fresh=1 "$base" /bin/sh -c \
  'rm -rf /var/lib/apt/lists/* /var/lib/apt/periodic/update-success-stamp && touch /var/lib/apt/lists &&
   python3 -m compileall -q /usr/lib/python3/dist-packages/gpulab_bytecode_cache.py')
trap 'docker rm -f "$cid" >/dev/null 2>&1' EXIT
docker cp "$here/overlay/." "$cid:/"
docker start -a "$cid" >&2
docker commit --change 'CMD ["/sbin/init"]' --change 'LABEL gpulab.fresh=1' "$cid" "$tag" >/dev/null
# Earlier derived images lose their tag; remove those no container uses any more (older than an hour: a
# scenario running beside this one may be starting containers from the one tagged a moment ago).
docker image prune -f --filter label=gpulab.fresh=1 --filter until=1h >/dev/null
echo "$tag"
