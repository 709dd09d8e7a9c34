#!/usr/bin/env bash
# Run the Molecule scenarios that CI gates on, each timed, in MOLECULE_JOBS lanes (default 2) side by
# side (scripts/lanes.py); after the first failure no new scenario starts. Each scenario starts from an
# image whose package lists were emptied seconds ago (lab/image/fresh.sh).
# A scenario joins the list (molecule/ci-scenarios.txt, longest first) once it has passed in a full
# `make test`; `scripts/molecule-all.sh NAME...` runs any scenarios by name; `--specs` prints the lane
# specs only (scripts/test-lanes.sh puts them beside the other stages).
set -euo pipefail
cd "$(dirname "$0")/.."
specs_only=false
if [ "${1:-}" = "--specs" ]; then specs_only=true; shift; fi
if [ $# -gt 0 ]; then
  scenarios=("$@")
else
  mapfile -t scenarios < <(grep -v '^\s*#' molecule/ci-scenarios.txt | grep -v '^\s*$')
fi
specs=()
for scenario in "${scenarios[@]}"; do
  [ -f "molecule/$scenario/molecule.yml" ] || { echo "no scenario molecule/$scenario" >&2; exit 2; }
  specs+=("molecule:$scenario=lab/image/fresh.sh >/dev/null && scripts/stage.sh molecule:$scenario molecule test -s $scenario")
done
if $specs_only; then printf '%s\n' "${specs[@]}"; exit 0; fi
exec "${VENV:-.venv}/bin/python" scripts/lanes.py "${MOLECULE_JOBS:-2}" "${GPULAB_TIMES_DIR:-.cache/times}/logs" "${specs[@]}"
