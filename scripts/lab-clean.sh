#!/usr/bin/env bash
# Leave this machine as a newcomer's: no project container, network, volume or image, whoever made it (the lab,
# a Molecule scenario, the bench, an earlier checkout's run that was killed). .ci/run starts with it, so a
# cached image can never be why CI passes. Docker's own state and other projects' objects stay.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/lab-down.sh >/dev/null
docker info >/dev/null 2>&1 || { echo "no Docker engine answers: nothing to clean"; exit 0; }
{
  docker ps -aq --filter label=gpulab.lab=1
  docker ps -aq --filter label=gpulab.molecule=1
  docker ps -aq --filter label=gpulab.fresh=1
  docker ps -a --format '{{.ID}} {{.Names}}' | awk '$2 ~ /^(gpulab|molecule)-/ {print $1}'
} | sort -u | xargs -r docker rm -f >/dev/null
docker network ls --format '{{.Name}}' | grep -E '^(gpulab|molecule)-' | xargs -r docker network rm >/dev/null
docker volume ls -q | grep -E '^(gpulab|molecule)-' | xargs -r docker volume rm -f >/dev/null
docker image ls --format '{{.Repository}}:{{.Tag}}' | grep -E '^gpulab-' | xargs -r docker image rm -f >/dev/null
docker image prune -f --filter label=gpulab.fresh=1 >/dev/null
rm -rf .cache/apt-repo .cache/facts .cache/times
left=$({ docker ps -a --format '{{.Names}}'; docker network ls --format '{{.Name}}'; docker volume ls -q
        docker image ls --format '{{.Repository}}'; } | grep -E '^(gpulab|molecule)-')
[ -z "$left" ] || { echo "error: project objects left after cleaning: $left" >&2; exit 1; }
echo "no project containers, networks, volumes or images left"
