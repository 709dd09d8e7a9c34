#!/usr/bin/env bash
# make test's stages in TEST_JOBS lanes (default 2; scripts/lanes.py): lint, unit, the integration run, then
# every CI Molecule scenario, longest first (molecule/ci-scenarios.txt). While the integration run holds one
# lane, the scenarios take turns in the other. The lab and the scenarios use separate networks, containers
# and controller directories, so they share the machine safely.
set -euo pipefail
cd "$(dirname "$0")/.."
specs=("lint=make --no-print-directory lint"
       "unit=make --no-print-directory unit"
       "integration=make --no-print-directory integration")
mapfile -t -O ${#specs[@]} specs < <(scripts/molecule-all.sh --specs)
exec "${VENV:-.venv}/bin/python" scripts/lanes.py "${TEST_JOBS:-2}" "$GPULAB_TIMES_DIR/logs" "${specs[@]}"
