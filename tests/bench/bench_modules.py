#!/usr/bin/env python3
"""make bench: median wall time of gpu_health and nvlink_topology on one lab node, each as a ratio of
ansible.builtin.ping measured in the same run (target: 1.5x ping or less). Needs the lab (make lab-up)."""

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TARGET = 1.5


def main():
    rounds = os.environ.get("BENCH_ROUNDS", "15")
    host = os.environ.get("BENCH_HOST", "gpu-a1")
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = dict(os.environ, BENCH_OUT=out.name, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
                   ANSIBLE_CALLBACK_PLUGINS=str(HERE / "callback_plugins"),
                   ANSIBLE_CALLBACKS_ENABLED="bench_timer", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.null")
        cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "--vault-password-file", ".lab/vault-pass",
               "-e", "@.lab/secrets.vault.yml", "-e", "bench_host=%s bench_rounds=%s" % (host, rounds),
               str(HERE / "bench_modules.yml")]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit("bench playbook failed (is the lab up? make lab-up):\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
        times = json.load(open(out.name))
    ping = statistics.median(times["Bench ping"])
    print("module call medians on %s over %s rounds (ping = the floor of any module call)" % (host, rounds))
    print("  %-26s %7.3f s  1.00x ping" % ("ansible.builtin.ping", ping))
    for name in ("gpu_health", "nvlink_topology"):
        med = statistics.median(times["Bench " + name])
        ratio = med / ping
        print("  %-26s %7.3f s  %.2fx ping (target <= %.1fx: %s)"
              % (name, med, ratio, TARGET, "met" if ratio <= TARGET else "NOT met"))


if __name__ == "__main__":
    main()
