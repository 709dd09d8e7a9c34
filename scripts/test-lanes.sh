#!/usr/bin/env bash
# make test's stages in TEST_JOBS lanes (default 3; scripts/lanes.py): the lab's integration run (the longest)
# starts at once in one lane; lint, unit, the broken inventories and every CI Molecule scenario, longest first
# (molecule/ci-scenarios.txt), take the other lanes as they free. Each stage waits much of its time (systemd,
# apt, health gates, alert timers), so three lanes keep two cores busier than two did. The lab and the
# scenarios use separate networks, containers, image tags and controller directories, so they share the
# machine safely.
set -euo pipefail
cd "$(dirname "$0")/.."
lab/image/build.sh >/dev/null   # the node image, built once before the lanes share it
# The lab's lane is the longest: the other stages run at a lower CPU priority (nice), and its nodes carry a
# higher CPU weight than Molecule's instances (playbooks/lab/up.yml, lab_cpu_shares), so when both want the
# two cores the lab goes first and the others fill the time it waits.
others=("yamllint=make --no-print-directory yamllint"
        "ansible-lint=make --no-print-directory ansible-lint"
        "unit=make --no-print-directory unit"
        "integration-inventories=make --no-print-directory integration-inventories")
mapfile -t -O ${#others[@]} others < <(scripts/molecule-all.sh --specs)
specs=("integration-lab=make --no-print-directory integration-lab")
for spec in "${others[@]}"; do specs+=("${spec%%=*}=nice -n 10 sh -c '${spec#*=}'"); done
exec "${VENV:-.venv}/bin/python" scripts/lanes.py "${TEST_JOBS:-3}" "$GPULAB_TIMES_DIR/logs" "${specs[@]}"
