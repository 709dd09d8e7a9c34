#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: nccl_bandwidth
short_description: Measure NCCL all-reduce bus bandwidth with nccl-tests and gate on it
description:
  - Runs nccl-tests' C(all_reduce_perf) (found on C(PATH), or at O(path)) over a message size sweep and
    parses its output, both the classic layout and the newer one framed by
    C(# Collective test starting/concluded).
  - Fails when any size returned wrong results (C(#wrong) not zero), when out-of-bounds values were
    reported, or when O(min_busbw_gbps) is given and the average bus bandwidth is below it. The message
    gives measured against required, and the size whose bandwidth was lowest relative to the best.
  - Output that cannot be parsed (a crash, a cut-off run, an NCCL failure line) is a failure naming what
    was missing, never a traceback.
  - The benchmark only reads; the module reports C(changed=false). In check mode it does not run the
    benchmark (it would load the GPUs for minutes) and returns C(skipped_in_check_mode=true).
version_added: "1.0.0"
author:
  - GPU cluster toolkit maintainers
options:
  path:
    description:
      - Path of C(all_reduce_perf). Default is the one on C(PATH), else C(/opt/nccl-tests/bin) (where the
        cuda_toolkit role installs it).
    type: path
  min_bytes:
    description: Smallest message size (C(-b)), with nccl-tests' suffixes (V(1G), V(512M)).
    type: str
    default: 1G
  max_bytes:
    description: Largest message size (C(-e)).
    type: str
    default: 16G
  step_factor:
    description: Multiplication factor between sizes (C(-f)).
    type: int
    default: 2
  gpus:
    description: GPUs per process (C(-g)). Default is O(gpu_count) for a single-process run.
    type: int
  iters:
    description: Timed iterations per size (C(-n)).
    type: int
    default: 20
  warmup_iters:
    description: Warm-up iterations per size (C(-w)).
    type: int
    default: 5
  check:
    description: Validate results (C(-c 1)); without it C(#wrong) reads N/A.
    type: bool
    default: true
  min_busbw_gbps:
    description: Lowest acceptable average bus bandwidth in GB/s (the hardware profile's threshold).
    type: float
  metric:
    description:
      - What O(min_busbw_gbps) is compared with. V(avg) is the run's C(# Avg bus bandwidth) over the whole
        sweep. V(largest) is the bus bandwidth of the largest message size (the better of out-of-place and
        in-place), what single-size health checks such as Azure aznhc (C(-b 16G -e 16G)) publish marks for.
    type: str
    choices: [avg, largest]
    default: avg
  launcher:
    description:
      - Command the benchmark runs under, for multi-node runs (for example
        V([mpirun, --allow-run-as-root, -np, "16", -H, "198.18.1.11:8,198.18.1.12:8"])).
    type: list
    elements: str
    default: []
  environment:
    description: Extra environment for the run (NCCL_IB_HCA, NCCL_SOCKET_IFNAME, ...).
    type: dict
    default: {}
  timeout:
    description: Seconds the run may take.
    type: int
    default: 1800
notes:
  - Supports check mode (the benchmark is not run).
requirements:
  - nccl-tests built with the NCCL and CUDA of the node (C(all_reduce_perf))
'''

EXAMPLES = r'''
- name: Gate the node on single-node all-reduce bandwidth (8x H100, 440 GB/s)
  nccl_bandwidth:
    gpus: 8
    min_busbw_gbps: 440
  register: nccl

- name: All-reduce across two nodes over the rails
  nccl_bandwidth:
    gpus: 1
    launcher: [mpirun, --allow-run-as-root, -np, "16", -H, "198.18.1.11:8,198.18.1.12:8"]
    environment: {NCCL_IB_HCA: "mlx5_0,mlx5_1"}
    min_busbw_gbps: 350
'''

RETURN = r'''
checks:
  description:
    - Every check, in the one result format of the toolkit's check modules (docs/DESIGN.md, "Check results").
    - "Four checks of the run, subject V(all_reduce_perf): V(exit) (exit code 0), V(wrong_results) (no size with #wrong), V(out_of_bounds) (0 values), V(busbw_gbps) (the O(metric) bus bandwidth against O(min_busbw_gbps))."
  returned: once the output was parsed
  type: list
  elements: dict
  contains:
    name: {description: Check name., type: str}
    subject: {description: "What was checked (V(all_reduce_perf)).", type: str}
    status: {description: V(ok), V(warn) or V(fail)., type: str}
    measured: {description: The value read (any type)., type: raw}
    expected: {description: What it was compared against (any type; null when nothing was expected)., type: raw}
    reason: {description: Why the status, naming the tool field and value where one is at fault., type: str}
verdict:
  description: The worst status in RV(checks) (V(fail) when there is none).
  returned: once the output was parsed
  type: str
  sample: ok
avg_busbw_gbps:
  description: The run's "# Avg bus bandwidth", GB/s.
  type: float
  returned: when the output was parsed
  sample: 446.673
nccl_version:
  description: NCCL version the run used, when the output names it.
  type: str
  returned: when the output was parsed
  sample: "2.28.7"
devices:
  description: One device name per rank, in rank order.
  type: list
  elements: str
  returned: when the output was parsed
  sample: ["NVIDIA H200", "NVIDIA H200"]
results:
  description: One entry per message size.
  type: list
  elements: dict
  returned: when the output was parsed
  sample: [{size_bytes: 8589934592, busbw_oop: 681.03, busbw_ip: 681.15, wrong_oop: 0, wrong_ip: 0}]
out_of_bounds:
  description: The run's out-of-bounds value count.
  type: int
  returned: when the output was parsed
  sample: 0
measured_busbw_gbps:
  description: The bus bandwidth compared with O(min_busbw_gbps), per O(metric), GB/s.
  type: float
  returned: when the output was parsed
  sample: 685.27
metric:
  description: The O(metric) the gate used.
  type: str
  returned: when the output was parsed
  sample: largest
weakest:
  description: The size with the lowest bus bandwidth relative to the best size, in the larger half of the sweep.
  type: dict
  returned: when the output was parsed
  sample: {size_bytes: 536870912, busbw_gbps: 356.6, best_size_bytes: 8589934592, best_busbw_gbps: 386.56, ratio: 0.922}
failures:
  description: Why the gate failed, one line each; empty when it passed.
  type: list
  elements: str
  returned: always
cmd:
  description: The argv that ran.
  type: list
  elements: str
  returned: always
'''

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.check_result import check, verdict
from ansible.module_utils.gpu_parsers import ParseError, readable_output
from ansible.module_utils.nccl_parsers import bandwidth_findings, parse_nccl_tests


def nccl_checks(parsed, gate, rc, min_busbw_gbps):
    """The run in the one result format: bus bandwidth, exit code, data check, out-of-bounds values."""
    subject = 'all_reduce_perf'
    oob = parsed['out_of_bounds']
    wrong = gate['wrong']
    return [
        check('busbw_gbps', subject, 'fail' if gate['below'] else 'ok', gate['measured_busbw_gbps'], min_busbw_gbps,
              gate['below'] or '%s bus bandwidth %.2f GB/s%s' % (
                  gate['metric'], gate['measured_busbw_gbps'],
                  ' (no minimum given)' if min_busbw_gbps is None else ', at least %.2f GB/s' % min_busbw_gbps)),
        check('exit', subject, 'ok' if rc == 0 else 'fail', rc, 0, 'exited %d' % rc),
        check('wrong_results', subject, 'fail' if wrong else 'ok', len(wrong), 0,
              '%d message size(s) with #wrong != 0' % len(wrong) if wrong else 'no #wrong results'),
        check('out_of_bounds', subject, 'ok' if oob == 0 else 'fail', oob, 0,
              "no '# Out of bounds values' line" if oob is None else '%d out-of-bounds values' % oob),
    ]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path'),
            min_bytes=dict(type='str', default='1G'),
            max_bytes=dict(type='str', default='16G'),
            step_factor=dict(type='int', default=2),
            gpus=dict(type='int'),
            iters=dict(type='int', default=20),
            warmup_iters=dict(type='int', default=5),
            check=dict(type='bool', default=True),
            min_busbw_gbps=dict(type='float'),
            metric=dict(type='str', choices=['avg', 'largest'], default='avg'),
            launcher=dict(type='list', elements='str', default=[]),
            environment=dict(type='dict', default={}),
            timeout=dict(type='int', default=1800),
        ),
        supports_check_mode=True,
    )
    p = module.params
    for name in ('step_factor', 'iters', 'warmup_iters', 'timeout'):
        if p[name] < 1:
            module.fail_json(msg='%s must be at least 1, got %d' % (name, p[name]))
    if p['gpus'] is not None and p['gpus'] < 1:
        module.fail_json(msg='gpus must be at least 1, got %d' % p['gpus'])
    # PATH first, as documented: get_bin_path searches opt_dirs before PATH.
    binary = (p['path'] or module.get_bin_path('all_reduce_perf')
              or module.get_bin_path('all_reduce_perf', opt_dirs=['/opt/nccl-tests/bin']))
    if not binary:
        module.fail_json(msg='all_reduce_perf (nccl-tests) is not on PATH; install nccl-tests or give path',
                         failures=[], cmd=[])
    argv = list(p['launcher']) + [binary, '-b', p['min_bytes'], '-e', p['max_bytes'], '-f', str(p['step_factor']),
                                  '-n', str(p['iters']), '-w', str(p['warmup_iters']),
                                  '-c', '1' if p['check'] else '0']
    if p['gpus'] is not None:
        argv += ['-g', str(p['gpus'])]
    if module.check_mode:
        module.exit_json(changed=False, skipped_in_check_mode=True, failures=[], cmd=argv)
    env = dict((str(k), str(v)) for k, v in p['environment'].items())
    rc, out, err = module.run_command(argv, environ_update=env)
    try:
        parsed = parse_nccl_tests(out)
    except ParseError as e:
        module.fail_json(msg='cannot use the all_reduce_perf output (rc=%d): %s%s'
                         % (rc, e, ('; stderr: ' + readable_output(err).strip().splitlines()[-1])
                            if err.strip() else ''),
                         rc=rc, stdout=readable_output(out), stderr=readable_output(err), failures=[str(e)], cmd=argv)
    gate = bandwidth_findings(parsed, p['min_busbw_gbps'], p['metric'])
    result = dict(
        changed=False, cmd=argv, rc=rc,
        avg_busbw_gbps=parsed['avg_busbw_gbps'], nccl_version=parsed['nccl_version'],
        cuda_version=parsed['cuda_version'], devices=[d['name'] for d in parsed['devices']],
        results=parsed['results'], out_of_bounds=parsed['out_of_bounds'], truncated=parsed['truncated'],
        weakest=gate['weakest'], failures=gate['failures'], min_busbw_gbps=p['min_busbw_gbps'],
        measured_busbw_gbps=gate['measured_busbw_gbps'], metric=gate['metric'],
    )
    if rc != 0:
        result['failures'].append('all_reduce_perf exited %d' % rc)
    if parsed['out_of_bounds'] is None:
        result['failures'].append("all_reduce_perf printed no '# Out of bounds values' line")
    result['checks'] = nccl_checks(parsed, gate, rc, p['min_busbw_gbps'])
    result['verdict'] = verdict(result['checks'])
    if result['failures']:
        module.fail_json(msg='NCCL all-reduce gate failed: ' + '; '.join(result['failures']), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
