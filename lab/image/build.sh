#!/usr/bin/env bash
# Build the lab node image from Debian bookworm with debootstrap, then `docker import` it.
# The tag is a hash of this directory, so the image is rebuilt only when its recipe changes.
# Usage: build.sh            prints the image reference, building it when missing. Tests and the lab run on
# the image fresh.sh derives from it (gpulab-node:latest), never on this one directly.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=${LAB_IMAGE_REPO:-gpulab-node}
mirror=${LAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
tag=$(cat "$here/build.sh" "$here/packages.txt" "$here/setup-rootfs.sh" | sha256sum | cut -c1-12)
ref="$repo:$tag"
# The lab and Molecule scenarios starting side by side build it once: the others wait here, then find it.
exec 9>"/var/tmp/gpulab-image-$tag.lock"
flock 9
if docker image inspect "$ref" >/dev/null 2>&1; then
  echo "$ref"
  exit 0
fi
work=$(mktemp -d /var/tmp/gpulab-rootfs.XXXXXX)
trap 'rm -rf "$work"' EXIT
include=$(grep -v '^\s*#' "$here/packages.txt" | grep -v '^\s*$' | paste -sd, -)
echo "building $ref with debootstrap (bookworm, $mirror)" >&2
debootstrap --variant=minbase --include="$include" bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  tail -40 "$work/debootstrap.log" >&2; echo "error: debootstrap failed (above: the end of its log)" >&2; exit 1; }
bash "$here/setup-rootfs.sh" "$work/rootfs" >&2
tar -C "$work/rootfs" -c . | docker import \
  --change 'CMD ["/sbin/init"]' \
  --change "ENV container=docker" \
  - "$ref" >/dev/null
echo "$ref"
