#!/usr/bin/env bash
# Remove everything the lab created: the rulebook service, containers, networks, keys, secrets, fact cache,
# reports.
# The debootstrap image stays cached (make lab-clean removes it and the package cache too).
set -uo pipefail
cd "$(dirname "$0")/.."
# The rulebook first: it would otherwise run playbooks against nodes going away.
scripts/eda.sh stop >/dev/null 2>&1 || true
if docker info >/dev/null 2>&1; then
  docker ps -aq --filter label=gpulab.lab=1 | xargs -r docker rm -f >/dev/null
  docker network ls -q --filter label=gpulab.lab=1 | xargs -r docker network rm >/dev/null
  # The next lab starts from an image derived then (lab/image/fresh.sh --keep).
  docker image rm gpulab-node:lab >/dev/null 2>&1 || true
fi
rm -rf .lab .cache/facts reports
echo "lab removed"
