#!/usr/bin/env bash
# Run the Molecule scenarios that CI gates on, each timed; stop at the first failure.
# A scenario joins the list (molecule/ci-scenarios.txt) once it has passed in a full `make test`;
# `scripts/molecule-all.sh NAME...` runs any scenarios by name.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then
  scenarios=("$@")
else
  mapfile -t scenarios < <(grep -v '^\s*#' molecule/ci-scenarios.txt | grep -v '^\s*$')
fi
for scenario in "${scenarios[@]}"; do
  [ -f "molecule/$scenario/molecule.yml" ] || { echo "no scenario molecule/$scenario" >&2; exit 2; }
  # Each scenario starts from an image whose package lists were emptied seconds ago (lab/image/fresh.sh).
  lab/image/fresh.sh >/dev/null
  scripts/stage.sh "molecule:$scenario" molecule test -s "$scenario"
done
