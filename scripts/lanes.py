#!/usr/bin/env python3
"""Run commands side by side in a fixed number of lanes, longest first as given.

Usage: lanes.py JOBS LOGDIR NAME=COMMAND [NAME=COMMAND ...]

A command still running after its hard limit fails: its process tree is printed, so a hang names what hung,
and the whole tree is killed, so the run ends well inside CI's limit. The hard limit of NAME is
budgets.HARD_LIMIT_FACTOR times its budget in tests/budgets.yml (stages), DEFAULT_LIMIT seconds for a name without
one; LANE_LIMIT (seconds) overrides both.

Each command runs through `sh -c`, its output going to LOGDIR/NAME.log; when it ends its whole log is
printed at once, so two lanes never interleave their lines. After the first failure no new command starts
(those running finish); the exit status is the first failing command's, or 0.

Much of a lab or Molecule run waits (systemd booting, apt, health gates, sleeps between polls), so on a
2-core machine two lanes finish well before one lane would."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import budgets

DEFAULT_LIMIT = 3600


def main(argv):
    jobs, logdir, specs = int(argv[1]), Path(argv[2]), argv[3:]
    limits = {name: budgets.hard_limit(s) for name, s in budgets.read()["stages"].items()}
    if jobs < 1 or not specs or any("=" not in s for s in specs):
        sys.exit(__doc__)
    logdir.mkdir(parents=True, exist_ok=True)
    queue = [tuple(s.split("=", 1)) for s in specs]
    running, first_rc = {}, 0
    while queue or running:
        while queue and len(running) < jobs and first_rc == 0:
            name, cmd = queue.pop(0)
            log = open(logdir / ("%s.log" % name), "w")
            limit = int(os.environ.get("LANE_LIMIT") or limits.get(name, DEFAULT_LIMIT))
            running[name] = (subprocess.Popen(["sh", "-c", cmd], stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True),
                             log, time.monotonic(), limit)
            print("lanes: started %s (%d running, %d waiting)" % (name, len(running), len(queue)), flush=True)
        if not running:
            break
        time.sleep(1)
        for name, (proc, log, start, limit) in list(running.items()):
            if proc.poll() is None:
                if time.monotonic() - start > limit:
                    stop(name, proc, limit, logdir)
                continue
            log.close()
            del running[name]
            sys.stdout.write((logdir / ("%s.log" % name)).read_text(errors="replace"))
            print("lanes: %s %s after %d s" % (name, "passed" if proc.returncode == 0 else
                                               "FAILED (rc=%d)" % proc.returncode, time.monotonic() - start),
                  flush=True)
            if proc.returncode != 0 and first_rc == 0:
                # killed by a signal (the hard limit's SIGTERM): 128 + its number, as a shell reports it
                first_rc = proc.returncode if proc.returncode > 0 else 128 - proc.returncode
                if queue:
                    print("lanes: not starting %s" % ", ".join(n for n, _ in queue), flush=True)
                queue = []
    return first_rc


def stop(name, proc, limit, logdir):
    """Print the process tree of a command past its limit (what it waits on), keep it beside the command's log
    as NAME.killed (time-report.py repeats it at the end of the run), then kill all of it."""
    tree = subprocess.run(["ps", "-o", "pid,etimes,stat,args", "--forest", "-g", str(proc.pid)],
                          capture_output=True, text=True).stdout
    (logdir / ("%s.killed" % name)).write_text("killed after %d s (its hard limit); its processes:\n%s" % (limit, tree))
    print("lanes: %s still running after %d s (its hard limit); its processes:\n%s" % (name, limit, tree), flush=True)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv))
