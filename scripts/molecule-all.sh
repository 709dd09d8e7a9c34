#!/usr/bin/env bash
# Run every Molecule scenario in molecule/, each timed; stop at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
for dir in molecule/*/; do
  scenario=$(basename "$dir")
  [ -f "$dir/molecule.yml" ] || continue
  scripts/stage.sh "molecule:$scenario" molecule test -s "$scenario"
done
