#!/usr/bin/env bash
# Make this machine able to run the lab and the tests: root, Docker engine, debootstrap, the venv.
# Installs what is missing with apt and pip, starts dockerd when none answers. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VENV:-.venv}

die() { printf 'error: %s\n' "$*" >&2; exit 1; }
say() { printf '==> %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
  die "the lab needs root (it runs containers with systemd and creates docker networks).
Run as root, or install these yourself and add your user to the docker group:
  apt-get install -y docker.io debootstrap python3-venv"
fi

need_pkgs=()
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need_pkgs+=(debootstrap)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_pkgs+=(python3-venv)
# Tools the suite uses beside Ansible: ssh client for the lab, git for ansible-lint, curl and flock for the
# package cache and the image build, ping for the fabric_probe unit test, gcc for the lab's NVML double
# (tests/apt_repo/nvml_shim.c), Java 17 for ansible-rulebook's rules engine (scripts/eda.sh).
for tool in ssh:openssh-client git:git curl:curl flock:util-linux ping:iputils-ping gcc:gcc java:openjdk-17-jre-headless; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need_pkgs+=("${tool#*:}")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || die "missing ${need_pkgs[*]} and no apt-get here: install them by hand"
  say "installing ${need_pkgs[*]} with apt"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  say "starting dockerd"
  if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
    systemctl start docker
  else
    # a dockerd killed mid-shutdown leaves its pid file, and a new one refuses to start while it exists
    pgrep -x dockerd >/dev/null || rm -f /var/run/docker.pid
    nohup dockerd >/var/log/gpulab-dockerd.log 2>&1 &
  fi
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || die "dockerd did not answer within 60 s; see /var/log/gpulab-dockerd.log"
fi

# Every systemd container takes several inotify instances; at the kernel's default of 128 per user, systemd as
# PID 1 exits at once (255) past about 25 containers. make test runs the lab beside a Molecule scenario, and
# make bench runs 26 bench nodes beside the lab.
limit=/proc/sys/fs/inotify/max_user_instances
if [ "$(cat "$limit")" -lt 1024 ]; then
  say "raising fs.inotify.max_user_instances to 1024 for the lab's systemd containers"
  echo 1024 > "$limit"
fi

stamp="$venv/.requirements.sha256"
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ ! -x "$venv/bin/ansible-playbook" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "creating the venv in $venv from requirements.txt"
  python3 -m venv "$venv"
  { "$venv/bin/pip" install -q --upgrade pip && "$venv/bin/pip" install -q -r requirements.txt; } \
    >"$venv/pip-install.log" 2>&1 || { tail -30 "$venv/pip-install.log" >&2; die "pip install failed (above)"; }
  echo "$want" > "$stamp"
fi
