#!/usr/bin/env bash
# make bench: every benchmark in turn, the lab converged (make bench brings it up). What they print goes to
# the terminal and, when all of them finished, to tests/bench/last-run.txt (the README points there), headed
# by the date, the commit and the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${VENV:-.venv}/bin/python
out=$(mktemp)
{
  echo "# make bench $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'):" \
       "$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo) GiB, $(uname -r)"
  for bench in parsers fabric preflight modules cluster; do
    echo
    echo "## tests/bench/bench_$bench.py"
    "$py" "tests/bench/bench_$bench.py"
  done
} | tee "$out"
mv "$out" tests/bench/last-run.txt
chmod 0644 tests/bench/last-run.txt
