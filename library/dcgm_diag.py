#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: dcgm_diag
short_description: Run DCGM diagnostics and name the causes of what failed
description:
  - Runs C(dcgmi diag -r <level> -j) and parses the JSON into per-test and per-GPU results
    (Pass, Fail, Warn, Skip with their messages). When the output is the boxed text table (O(json=false),
    or a C(dcgmi) that ignores C(-j)) that is parsed instead.
  - Fails when any test has a status in O(fail_on) (Fail by default), listing each with its named cause, one of
    C(persistence_mode_off), C(fabric_manager_not_running), C(xid_errors), C(ecc_errors),
    C(pending_page_retirement_or_row_remap), C(throttling), C(processes_using_gpu), C(inforom_corrupt),
    C(conflicting_environment), C(denylisted_driver), C(library_missing), C(permissions), C(pcie),
    C(nvlink), C(memory_errors), C(power_or_thermal), C(compute_stress), else C(unclassified).
  - Fails closed. A test in O(required_tests) that was skipped or that dcgmi did not list, a run where no test
    ran, and a non-zero exit that no failed test explains are fails. Any other skipped test is a V(warn) with
    its reason (DCGM skips what a GPU does not support), or ok when O(allowed_skips) names it. Output that cannot be parsed (a text table cut off before its closing border, JSON cut off or
    of another shape) fails with a message naming what is missing, never a traceback.
  - Level 1 takes seconds, level 2 about 2 minutes, level 3 about 15 minutes, level 4 much longer; the
    default is 1. In check mode the diagnostic is not run.
version_added: "1.0.0"
author:
  - GPU cluster toolkit maintainers
options:
  level:
    description: Diagnostic level (C(-r)).
    type: int
    choices: [1, 2, 3, 4]
    default: 1
  gpu_list:
    description: Only these GPU ids (C(-i)). Default is every GPU.
    type: list
    elements: int
  json:
    description: Ask for JSON (C(-j)).
    type: bool
    default: true
  fail_on:
    description: Statuses that fail the module.
    type: list
    elements: str
    choices: [Fail, Warn]
    default: [Fail]
  path:
    description: Path of C(dcgmi). Default is the one on C(PATH).
    type: path
  timeout:
    description: Seconds the diagnostic may take.
    type: int
    default: 3600
  allowed_skips:
    description:
      - Names of tests (as dcgmi prints them, e.g. V(Pulse Test)) that may report Skip on this hardware, whose
        skip is ok. Any other skip is a V(warn), or a fail when O(required_tests) names the test.
    type: list
    elements: str
    default: []
  required_tests:
    description: Names of tests that must run (a skip, or a level that does not list them, fails).
    type: list
    elements: str
    default: []
notes:
  - Supports check mode (the diagnostic is not run).
  - C(nv-hostengine) must be running (the C(nvidia-dcgm) service), as for any C(dcgmi) call.
requirements:
  - NVIDIA DCGM (C(dcgmi))
'''

EXAMPLES = r'''
- name: Quick DCGM diagnostic before the node serves
  dcgm_diag:
    level: 1
  register: diag

- name: Long diagnostic on two GPUs, warnings fail too
  dcgm_diag:
    level: 3
    gpu_list: [0, 1]
    fail_on: [Fail, Warn]
'''

RETURN = r'''
checks:
  description:
    - Every check, in the one result format of the toolkit's check modules (docs/DESIGN.md, "Check results").
    - "One per test (name the test, subject its category: V(Deployment), V(Hardware), ...; Pass is ok, Fail is fail, Warn is fail when O(fail_on) names it else warn, Skip is fail when O(required_tests) names it, ok when O(allowed_skips) does, else warn), one fail per O(required_tests) entry not listed (subject V(required)), V(ran) (subject V(diag)) when no test ran, V(exit) (subject V(dcgmi)) for a non-zero exit no failed test explains."
  returned: once the output was parsed
  type: list
  elements: dict
  contains:
    name: {description: Check name., type: str}
    subject: {description: "What was checked (V(Deployment), V(Integration)).", type: str}
    status: {description: V(ok), V(warn) or V(fail)., type: str}
    measured: {description: The value read (any type)., type: raw}
    expected: {description: What it was compared against (any type; null when nothing was expected)., type: raw}
    reason: {description: Why the status, naming the tool field and value where one is at fault., type: str}
verdict:
  description: The worst status in RV(checks) (V(fail) when there is none).
  returned: once the output was parsed
  type: str
  sample: ok
tests:
  description: Every test, in order.
  type: list
  elements: dict
  returned: when the output was parsed
  sample:
    - category: Deployment
      name: Persistence Mode
      status: Fail
      gpus: {}
      messages: ["Persistence mode for GPU 0 is currently disabled."]
per_gpu:
  description: "{gpu id: {test name: status}} for tests that reported per GPU."
  type: dict
  returned: when the output was parsed
causes:
  description: One entry per failed or warned test, with its named cause and the GPUs it names.
  type: list
  elements: dict
  returned: when the output was parsed
  sample:
    - {cause: persistence_mode_off, test: Persistence Mode, status: Fail, gpus: ["0"], message: "Persistence mode for GPU 0 is currently disabled."}
summary:
  description: Count of tests per status.
  type: dict
  returned: when the output was parsed
  sample: {pass: 8, fail: 1, warn: 0, skip: 0}
fail_on:
  description: The O(fail_on) statuses the verdict used (callers that ignore C(failed) re-apply it to RV(causes)).
  type: list
  elements: str
  returned: when the output was parsed
  sample: [Fail]
dcgm_version:
  description: DCGM version the output names, if any.
  type: str
  returned: when the output was parsed
cmd:
  description: The argv that ran.
  type: list
  elements: str
  returned: always
'''

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.check_result import verdict
from ansible.module_utils.dcgm_parsers import diag_causes, diag_checks, parse_dcgmi_diag, per_gpu, summarize
from ansible.module_utils.gpu_parsers import ParseError, readable_output


def main():
    module = AnsibleModule(
        argument_spec=dict(
            level=dict(type='int', choices=[1, 2, 3, 4], default=1),
            gpu_list=dict(type='list', elements='int'),
            json=dict(type='bool', default=True),
            fail_on=dict(type='list', elements='str', choices=['Fail', 'Warn'], default=['Fail']),
            path=dict(type='path'),
            timeout=dict(type='int', default=3600),
            allowed_skips=dict(type='list', elements='str', default=[]),
            required_tests=dict(type='list', elements='str', default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    binary = p['path'] or module.get_bin_path('dcgmi')
    if not binary:
        module.fail_json(msg='dcgmi is not on PATH; install NVIDIA DCGM (datacenter-gpu-manager) or give path', cmd=[])
    argv = [binary, 'diag', '-r', str(p['level'])]
    if p['gpu_list']:
        argv += ['-i', ','.join(str(g) for g in p['gpu_list'])]
    if p['json']:
        argv.append('-j')
    if module.check_mode:
        module.exit_json(changed=False, skipped_in_check_mode=True, cmd=argv)
    rc, out, err = module.run_command(argv)
    try:
        parsed = parse_dcgmi_diag(out)
    except ParseError as e:
        module.fail_json(msg='cannot read the dcgmi diag output (rc=%d): %s%s'
                         % (rc, e, ('; stderr: ' + readable_output(err).strip().splitlines()[-1])
                            if err.strip() else ''),
                         rc=rc, stdout=readable_output(out), stderr=readable_output(err), cmd=argv)
    causes = diag_causes(parsed)
    checks = diag_checks(parsed, rc, p['fail_on'], p['allowed_skips'], p['required_tests'])
    result = dict(changed=False, cmd=argv, rc=rc, level=p['level'], checks=checks, verdict=verdict(checks),
                  tests=parsed['tests'], per_gpu=per_gpu(parsed), causes=causes, summary=summarize(parsed),
                  dcgm_version=parsed['version'], driver_version=parsed['driver'], fail_on=p['fail_on'])
    failing = [c['reason'] for c in checks if c['status'] == 'fail']
    if failing:
        module.fail_json(msg='DCGM diagnostic level %d: %s' % (p['level'], '; '.join(failing)), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
