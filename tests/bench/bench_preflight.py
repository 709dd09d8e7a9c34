#!/usr/bin/env python
# -*- coding: utf-8 -*-
"""Benchmark (not a test): playbooks/preflight.yml on 35, 259 and 1,003 hosts (4, 32 and 125 racks of 8 HGX H100
nodes, plus 2 load balancers and 1 monitoring host: inventories/example and its generated variants,
tests/integration/gen_inventory.py). Preflight runs once per run on the controller, so its cost is one play of
the controller whatever the host count, plus reading the inventory. Goal: 1,003 hosts within 10 s.

Run: .venv/bin/python tests/bench/bench_preflight.py [--racks 4,32,125]
Prints each time, the time per host, and the 1,000-host time as a ratio of its goal; exits 1 when it misses or a
run fails.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'integration'))

import gen_inventory  # noqa: E402

GOAL_S = 10.0
GOAL_RACKS = 125


def run(inventory):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_RETRY_FILES_ENABLED='0')
    env.pop('GPULAB_TASK_TIMES', None)
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', inventory,
           '--vault-password-file', os.path.join(inventory, 'DUMMY-vault-password.txt'),
           os.path.join(ROOT, 'playbooks', 'preflight.yml')]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    return time.monotonic() - start, proc


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--racks', default='4,32,%d' % GOAL_RACKS, help='rack counts, comma separated')
    args = parser.parse_args(argv)
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for racks in [int(r) for r in args.racks.split(',')]:
            inventory = str(gen_inventory.write(os.path.join(tmp, 'inventory-%d' % racks), racks))
            groups = gen_inventory.hosts(racks)['all']['children']
            hosts = sum(len(g['hosts']) for g in groups['gpu_nodes']['children'].values()) + len(
                groups['lb']['hosts']) + len(groups['monitoring']['hosts'])
            seconds, proc = run(inventory)
            if proc.returncode != 0:
                print('preflight on %d hosts FAILED (rc %d):\n%s' % (hosts, proc.returncode, proc.stdout[-3000:]))
                failed = True
                continue
            line = 'preflight, %d hosts (%d racks): %.1f s, %.1f ms per host' % (hosts, racks, seconds,
                                                                               1000 * seconds / hosts)
            if racks == GOAL_RACKS:
                line += ' (%.2fx of the %.0f s goal)' % (seconds / GOAL_S, GOAL_S)
                failed = failed or seconds > GOAL_S
            print(line, flush=True)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
