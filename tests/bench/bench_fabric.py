#!/usr/bin/env python
# -*- coding: utf-8 -*-
"""Benchmark (not a test): the fabric check and the readiness report at a thousand nodes, without hardware.

1. One node probing 1,000 peers on 8 rails in one fabric_probe call (the module run as Ansible runs it, from
   an arguments file), the peers being 127.0.0.0/8 addresses on this machine's loopback, whose MTU (65536)
   carries the 9000-byte don't-fragment probe. Goal: the 8,000 probes within 10 s.
2. The controller side for 1,000 synthetic nodes on 8 rails: fabric attribution (fabric_verdicts, once per
   play), one readiness row per node (readiness_row on results built by the modules' own converters), and the
   reports readiness_report writes (readiness.json, readiness.md, one JSON per node). One node's rail3 port
   drops jumbo frames (every pair with it fails both ways) and 50 random pairs fail besides. Goal: within 10 s
   and 1 GiB peak.

Run: .venv/bin/python tests/bench/bench_fabric.py [--peers N] [--rails R] [--nodes N]
Prints each figure as a ratio of its goal; exits 1 when one misses.
"""

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'unit'))
sys.path.insert(0, os.path.join(ROOT, 'filter_plugins'))

import conftest  # noqa: E402,F401  (puts module_utils on ansible.module_utils.__path__)
from ansible.module_utils.check_result import from_mismatches, from_severity_map  # noqa: E402
from fabric import fabric_failed_pairs, fabric_verdicts  # noqa: E402
from readiness import readiness_markdown, readiness_row, readiness_table  # noqa: E402

PROBE_GOAL_S = 10.0
CONTROLLER_GOAL_S = 10.0
CONTROLLER_GOAL_MIB = 1024.0
MTU = 9000


def loopback_targets(peers, rails):
    """One target per rail and peer: rail r's own address 127.<r+1>.255.254, peer p's 127.<r+1>.<p/250>.<p%250+1>."""
    return [{'rail': 'rail%d' % r, 'src': 'bench', 'dst': 'peer%d' % p, 'src_if': 'lo',
             'src_addr': '127.%d.255.254' % (r + 1), 'dst_addr': '127.%d.%d.%d' % (r + 1, p // 250, p % 250 + 1),
             'mtu': MTU, 'payload': MTU - 28}
            for r in range(rails) for p in range(peers)]


def bench_probe(peers, rails):
    targets = loopback_targets(peers, rails)
    with tempfile.TemporaryDirectory() as tmp:
        args = os.path.join(tmp, 'args.json')
        with open(args, 'w') as f:
            json.dump({'ANSIBLE_MODULE_ARGS': {'targets': targets, 'timeout': 1}}, f)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, os.path.join(ROOT, 'library', 'fabric_probe.py'), args],
                              capture_output=True, text=True)
        elapsed = time.perf_counter() - start
    result = json.loads(proc.stdout)
    if result.get('failed') or result.get('pairs_ok') != len(targets):
        print('fabric_probe: %d of %d probes failed: %s' % (
            len(targets) - result.get('pairs_ok', 0), len(targets),
            json.dumps(result.get('results', result))[:600]))
        return False
    print('fabric_probe, %d peers x %d rails = %d probes in one call: %.1f s (%.2fx of the %.0f s goal)' % (
        peers, rails, len(targets), elapsed, elapsed / PROBE_GOAL_S, PROBE_GOAL_S))
    return elapsed <= PROBE_GOAL_S


def _ok():
    return {'severity': 'ok', 'message': 'm'}


def node_results(index, gpus=8):
    """What node_verify gathers for one node, in the one result format, built by the modules' converters."""
    gpu_checks = [{'index': i, 'checks': {'ecc': _ok(), 'xid': _ok(), 'pcie': _ok(), 'temperature': _ok()}}
                  for i in range(gpus)]
    if index % 97 == 5:  # a node now and then with a double-bit ECC error
        gpu_checks[3]['checks']['ecc'] = {'severity': 'fail', 'message': '1 volatile uncorrectable'}
    checks = [c for g in gpu_checks for c in from_severity_map('GPU%d' % g['index'], g['checks'])]
    node = {'count': _ok()}
    return {
        'topology': {'topology': {'gpu_count': gpus}, 'mismatches': [],
                     'checks': from_mismatches([], [('symmetry', 'both ways'), ('link_code', 'NV18')])},
        'gpu': {'gpus': gpu_checks, 'node': node, 'checks': checks + from_severity_map('node', node)},
        'rdma': {'ports': [{'device': 'mlx5_%d' % r} for r in range(8)], 'mismatches': [],
                 'checks': from_mismatches([], [('netdev_mtu', MTU)], subject='mlx5_0/1')},
    }


def fabric_reports(nodes, rails, broken, bad_rail, stray, rng):
    """Each node's fabric_verify_report as fabric_report makes it: only failures and interfaces."""
    names = ['gpu-%04d' % i for i in range(nodes)]
    failures = {n: [] for n in names}

    def fail(rail, src, dst):
        failures[src].append({'rail': rail, 'src': src, 'dst': dst, 'src_if': 'eth4', 'src_addr': 's',
                              'dst_addr': 'd', 'payload': MTU - 28, 'error': 'no reply within 1 s'})
    for peer in names:
        if peer != broken:
            fail(bad_rail, broken, peer)
            fail(bad_rail, peer, broken)
    for _ in range(stray):
        src, dst = rng.sample(names, 2)
        fail('rail%d' % rng.randrange(rails), src, dst)
    reports = {}
    for n in names:
        interfaces = [{'rail': 'rail%d' % r, 'host': n, 'interface': 'eth%d' % (r + 1), 'address': 'a',
                       'mtu': MTU, 'expected_mtu': MTU, 'ok': True} for r in range(rails)]
        reports[n] = {'pairs_checked': (nodes - 1) * rails, 'pairs_ok': (nodes - 1) * rails - len(failures[n]),
                      'failures': failures[n], 'interfaces': interfaces, 'mtu_mismatches': [],
                      'ok': not failures[n]}
    return reports


def bench_controller(nodes, rails):
    rng = random.Random(25)
    bad_rail = 'rail%d' % min(3, rails - 1)
    reports = fabric_reports(nodes, rails, 'gpu-0007', bad_rail, 50, rng)
    results = {n: node_results(i) for i, n in enumerate(sorted(reports))}
    start = time.perf_counter()
    verdicts = fabric_verdicts(reports)
    attributed = time.perf_counter()
    rows, details = [], {}
    for n in sorted(reports):
        res = dict(results[n], fabric=verdicts[n])
        row = readiness_row(res, n, 'rack_%02d' % (int(n[4:]) // 32), 'hgx-h200-8gpu')
        rows.append(row)
        details[n] = {'row': row, 'results': res, 'fabric': reports[n]}
    reduced = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        for n, detail in details.items():
            with open(os.path.join(out, n + '.json'), 'w') as f:
                f.write(json.dumps(detail, indent=4, sort_keys=True) + '\n')
        report = {'nodes': rows, 'ready': [r['node'] for r in rows if r['ready']],
                  'not_ready': [r['node'] for r in rows if not r['ready']]}
        with open(os.path.join(out, 'readiness.json'), 'w') as f:
            f.write(json.dumps(report, indent=4, sort_keys=True) + '\n')
        with open(os.path.join(out, 'readiness.md'), 'w') as f:
            f.write(readiness_markdown(rows, details, 'bench'))
        readiness_table(rows)
    written = time.perf_counter()
    # The whole process's peak, the synthetic inputs included: an upper bound of what the controller holds.
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    elapsed = written - start
    not_ready = report['not_ready']
    # The attribution must be right for the figure to mean anything: the broken node fails on rail3 alone,
    # its peers only warn about it, the stray pairs fail both ends.
    broken = verdicts['gpu-0007']
    assert broken['status'] == 'fail' and broken['reasons'][0] == \
        '%s: every full-size ping to and from all %d peers failed' % (bad_rail, nodes - 1), broken['reasons'][:2]
    assert 'gpu-0007' in not_ready and all(
        'gpu-0007 is at fault on ' + bad_rail in ' '.join(verdicts[n]['reasons']) for n in reports if n != 'gpu-0007')
    stray = set(f['src'] for n in reports for f in reports[n]['failures'] if f['dst'] != 'gpu-0007'
                and f['src'] != 'gpu-0007')
    assert stray <= set(not_ready), sorted(stray - set(not_ready))
    assert sum(len(fabric_failed_pairs(r)) for r in reports.values()) >= 2 * (nodes - 1)
    print('controller, %d nodes x %d rails (%d not ready): attribution %.2f s, readiness rows %.2f s, reports '
          '%.2f s; %.2f s in all (%.2fx of the %.0f s goal), peak RSS %.0f MiB (%.2fx of %.0f MiB)' % (
              nodes, rails, len(not_ready), attributed - start, reduced - attributed, written - reduced, elapsed,
              elapsed / CONTROLLER_GOAL_S, CONTROLLER_GOAL_S, peak_mib, peak_mib / CONTROLLER_GOAL_MIB,
              CONTROLLER_GOAL_MIB))
    return elapsed <= CONTROLLER_GOAL_S and peak_mib <= CONTROLLER_GOAL_MIB


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--peers', type=int, default=1000)
    parser.add_argument('--rails', type=int, default=8)
    parser.add_argument('--nodes', type=int, default=1000)
    args = parser.parse_args(argv)
    ok = bench_probe(args.peers, args.rails)
    ok = bench_controller(args.nodes, args.rails) and ok
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
