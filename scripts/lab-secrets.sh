#!/usr/bin/env bash
# Generate the lab's SSH key and its BMC credentials, vault-encrypted, under .lab/ (never committed).
# Production sites use their own vault files or AWX credentials instead.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VENV:-.venv}
mkdir -p .lab/ssh
chmod 700 .lab
[ -f .lab/ssh/id_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -C gpulab -f .lab/ssh/id_ed25519
if [ ! -f .lab/vault-pass ]; then
  umask 077
  head -c 32 /dev/urandom | base64 > .lab/vault-pass
fi
if [ ! -f .lab/secrets.vault.yml ]; then
  umask 077
  pw=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
  printf -- '---\nbmc_username: labadmin\nbmc_password: %s\n' "$pw" > .lab/secrets.yml
  "$venv/bin/ansible-vault" encrypt --vault-password-file .lab/vault-pass \
    --output .lab/secrets.vault.yml .lab/secrets.yml >/dev/null
  rm -f .lab/secrets.yml
fi
