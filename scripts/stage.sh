#!/usr/bin/env bash
# Run one stage of the suite and print how long it took: stage.sh NAME COMMAND...
name=$1; shift
start=$(date +%s)
printf '\n===== stage %s: %s\n' "$name" "$*"
"$@"; rc=$?
printf '===== stage %s: %s in %ds\n' "$name" "$([ $rc -eq 0 ] && echo passed || echo "FAILED (rc=$rc)")" "$(( $(date +%s) - start ))"
exit $rc
