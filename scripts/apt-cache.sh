#!/usr/bin/env bash
# The package cache of the lab and the tests: Debian's apt-cacher-ng in a container on the host network
# (port 3142), its cache in the docker volume gpulab-apt-cache. Lab nodes and Molecule instances reach it
# through their network's gateway when it answers (lab/image/fresh.sh gives them the proxy lookup) and go
# straight to the mirror when it does not: every package still comes from Debian's real repositories and
# every converge still installs it, only the second download of a file is served from here.
# Answers only loopback, the lab's networks (198.18.0.0/15) and Docker's default bridges (172.16.0.0/12), for
# scenarios without a network of their own (tcp wrappers).
#   apt-cache.sh start    start it when it is not running (make cache does); LAB_APT_CACHE=0 skips it
#   apt-cache.sh remove   remove the container and the cached packages (make lab-clean does)
set -euo pipefail
cd "$(dirname "$0")/.."
name=gpulab-apt-cache
port=3142  # lab/image/overlay/usr/local/sbin/gpulab-apt-proxy asks this port
case "${1:-}" in
  start)
    [ "${LAB_APT_CACHE:-1}" = 0 ] && exit 0
    # Recreated when this script changed since it was started (the label holds the script's hash).
    recipe=$(cat "$0" | sha256sum | cut -c1-12)
    if [ "$(docker inspect -f '{{.State.Running}} {{index .Config.Labels "gpulab.cache"}}' "$name" 2>/dev/null)" \
         != "true $recipe" ]; then
      docker rm -f "$name" >/dev/null 2>&1 || true
      docker run -d --name "$name" --label gpulab.cache="$recipe" --network host --restart unless-stopped \
        -v gpulab-apt-cache:/var/cache/apt-cacher-ng "$(lab/image/build.sh)" bash -c "
          set -e
          command -v apt-cacher-ng >/dev/null || {
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq apt-cacher-ng >/dev/null; }
          echo 'apt-cacher-ng: 127.0.0.1 198.18.0.0/255.254.0.0 172.16.0.0/255.240.0.0' > /etc/hosts.allow
          echo 'apt-cacher-ng: ALL' > /etc/hosts.deny
          # Release files pass through uncached: apt-cacher-ng 3.7.4 fails to replace a cached InRelease that
          # several clients refresh in the same second (\"Failure to move file ... out of the way\") and leaves
          # the losing client's request unanswered; apt then waits forever (a CI run lost 70 min to it).
          # DontCacheResolved, not DontCacheRequested: 3.7.4 answers 400 to every request the latter matches.
          echo 'DontCacheResolved: (In)?Release(\\.gpg)?\$' > /etc/apt-cacher-ng/zz-gpulab.conf
          chown -R apt-cacher-ng: /var/cache/apt-cacher-ng
          exec /usr/sbin/apt-cacher-ng -c /etc/apt-cacher-ng ForeGround=1 Port=$port BindAddress=0.0.0.0" >/dev/null
    fi
    for _ in $(seq 1 120); do
      curl -fsS -o /dev/null "http://127.0.0.1:$port/acng-report.html" 2>/dev/null && break
      sleep 1
    done
    # A release file through the cache, as every node's apt-get update asks it: a cache that answers its
    # report page but refuses these (a bad directive answers 400) would fail every converge.
    release=http://deb.debian.org/debian/dists/bookworm/InRelease
    if curl -fsS -m 60 -o /dev/null -x "http://127.0.0.1:$port" "$release"; then exit 0; fi
    docker logs --tail 20 "$name" >&2
    echo "error: the package cache ($name) did not serve $release on port $port within 120 s" >&2
    exit 1
    ;;
  remove)
    docker rm -f "$name" >/dev/null 2>&1 || true
    docker volume rm gpulab-apt-cache >/dev/null 2>&1 || true
    ;;
  *)
    sed -n '2,9p' "$0" >&2
    exit 2
    ;;
esac
