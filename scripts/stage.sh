#!/usr/bin/env bash
# Run one stage of the suite and print how long it took: stage.sh NAME COMMAND...
# With GPULAB_TIMES_DIR set (make test sets it), the stage's time is also appended to stages.tsv there and
# GPULAB_STAGE names the stage for the task_timings callback; scripts/time-report.py prints both.
name=$1; shift
start=$(date +%s)
printf '\n===== stage %s: %s\n' "$name" "$*"
GPULAB_STAGE=$name "$@"; rc=$?
secs=$(( $(date +%s) - start ))
status=$([ $rc -eq 0 ] && echo passed || echo "FAILED (rc=$rc)")
printf '===== stage %s: %s in %ds\n' "$name" "$status" "$secs"
if [ -n "${GPULAB_TIMES_DIR:-}" ]; then
  mkdir -p "$GPULAB_TIMES_DIR"
  printf '%s\t%s\t%s\t%s\n' "$start" "$name" "$secs" "$status" >> "$GPULAB_TIMES_DIR/stages.tsv"
fi
exit $rc
