#!/usr/bin/env bash
# make test's stages in TEST_JOBS lanes (default 2; scripts/lanes.py): the lab's integration run (the longest,
# about half of all the work) starts at once in one lane; lint, unit, the broken inventories and every CI
# Molecule scenario, longest first (molecule/ci-scenarios.txt), take turns in the other. The lab and the
# scenarios use separate networks, containers, image tags and controller directories, so they share the
# machine safely.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/apt-cache.sh start   # builds the node image first when this machine has none
specs=("integration-lab=make --no-print-directory integration-lab"
       "lint=make --no-print-directory lint"
       "unit=make --no-print-directory unit"
       "integration-inventories=make --no-print-directory integration-inventories")
mapfile -t -O ${#specs[@]} specs < <(scripts/molecule-all.sh --specs)
exec "${VENV:-.venv}/bin/python" scripts/lanes.py "${TEST_JOBS:-2}" "$GPULAB_TIMES_DIR/logs" "${specs[@]}"
