#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: nvlink_topology
short_description: Read and verify the GPU/NIC topology reported by nvidia-smi
description:
  - Runs C(nvidia-smi topo -m) and parses the connection matrix (tab or space separated, with or
    without ANSI escapes, old and new legends, C(NIC Legend) or old C(mlx5_*) column names).
  - Optionally runs C(nvidia-smi nvlink -s) (link states and speeds) and C(nvidia-smi nvlink -e)
    (per-link error counters).
  - With O(expected), verifies GPU count, GPU-GPU link codes, NIC distance, NVLink state and error
    counters, and fails listing every mismatch.
  - Read-only; never reports a change.
version_added: "1.0.0"
author:
  - GPU cluster toolkit maintainers
options:
  nvlink_status:
    description:
      - Also run C(nvidia-smi nvlink -s) and return per-GPU link states in RV(topology.nvlink).
      - Turned on automatically when O(expected.nvlinks_active) or O(expected.links_per_gpu) is set.
    type: bool
    default: false
  nvlink_errors:
    description:
      - Also run C(nvidia-smi nvlink -e) and return per-link error counters in RV(topology.nvlink_errors).
      - Turned on automatically when O(expected.max_nvlink_errors) is set.
    type: bool
    default: false
  nvidia_smi_path:
    description:
      - Path to C(nvidia-smi). Default is to search C(PATH) (and C(/usr/bin), C(/usr/local/bin)).
    type: path
  expected:
    description:
      - What the topology must look like. Every key is optional.
    type: dict
    suboptions:
      gpu_count:
        description: Number of GPUs in the matrix.
        type: int
      nic_count:
        description: Number of NICs in the matrix.
        type: int
      link_code:
        description:
          - Exact code every GPU pair must show, for example V(NV18). Takes precedence over O(expected.min_nvlinks).
        type: str
      min_nvlinks:
        description: Every GPU pair must be joined by at least this many bonded NVLinks (C(NV#) with C(#) >= n).
        type: int
      nic_max_distance:
        description:
          - Every GPU must have at least one NIC at this distance or closer.
          - Order, closest first, V(X) < V(PIX) < V(PXB) < V(PHB) < V(NODE) < V(SYS).
        type: str
        choices: [PIX, PXB, PHB, NODE, SYS]
      nvlinks_active:
        description: Every NVLink of every GPU must be active (from C(nvidia-smi nvlink -s)).
        type: bool
      links_per_gpu:
        description: Number of active NVLinks every GPU must have.
        type: int
      max_nvlink_errors:
        description:
          - Highest allowed value of the C(nvidia-smi nvlink -e) counters.
          - Either one integer for every counter, or a dict from counter name (V(replay_errors),
            V(recovery_errors), V(crc_errors)) to its limit.
        type: raw
notes:
  - Supports check mode; the module only reads.
  - "C(links) uses the real NIC names of the C(NIC Legend) (C(mlx5_0)) as keys, not C(NIC0)."
  - "C(speed_gbps) is the per-link figure nvidia-smi prints, in GB/s."
requirements:
  - nvidia-smi (NVIDIA driver)
seealso:
  - module: gpu_health
'''

EXAMPLES = r'''
- name: Read the topology
  nvlink_topology:
  register: __gpu_topology

- name: Verify an HGX H100 node (NV18 everywhere, a NIC behind the same PCIe switch)
  nvlink_topology:
    nvlink_status: true
    expected:
      gpu_count: 8
      link_code: NV18
      nic_max_distance: PXB
      nvlinks_active: true
      max_nvlink_errors:
        crc_errors: 0
        replay_errors: 100

- name: Accept any GPU pair with at least 4 NVLinks
  nvlink_topology:
    expected:
      min_nvlinks: 4
'''

RETURN = r'''
---
checks:
  description:
    - Every check, in the one result format of the toolkit's check modules (docs/DESIGN.md, "Check results").
    - "One fail per mismatch (subject the GPU pair, GPU, GPU link or V(node)); one ok with subject V(node) for every expectation that held, and for V(symmetry) (every link reads the same from both ends)."
  returned: once nvidia-smi's output was parsed (also on mismatch)
  type: list
  elements: dict
  contains:
    name: {description: Check name., type: str}
    subject: {description: "What was checked (V(GPU0-GPU1), V(GPU2 link 5), V(node)).", type: str}
    status: {description: V(ok), V(warn) or V(fail)., type: str}
    measured: {description: The value read (any type)., type: raw}
    expected: {description: What it was compared against (any type; null when nothing was expected)., type: raw}
    reason: {description: Why the status, naming the tool field and value where one is at fault., type: str}
verdict:
  description: The worst status in RV(checks) (V(fail) when there is none).
  returned: once nvidia-smi's output was parsed (also on mismatch)
  type: str
  sample: ok
topology:
  description: Parsed topology (also returned when verification fails).
  returned: success or mismatch
  type: dict
  contains:
    gpu_count:
      description: Number of GPUs in the matrix.
      type: int
      sample: 8
    gpus:
      description: GPU names in matrix order.
      type: list
      elements: str
      sample: [GPU0, GPU1]
    nics:
      description: NIC device names (from the NIC Legend, else the column names).
      type: list
      elements: str
      sample: [mlx5_0, mlx5_1]
    nic_columns:
      description: NIC column names as printed (C(NIC0) or C(mlx5_0)).
      type: list
      elements: str
    links:
      description: Symmetric nested map of link codes; self entries omitted.
      type: dict
      sample: {GPU0: {GPU1: NV18, mlx5_0: PXB}}
    cpu_affinity:
      description: CPU affinity per GPU ("" when the field is empty or absent).
      type: dict
      sample: {GPU0: "0-55,112-167"}
    numa_affinity:
      description: NUMA affinity per GPU ("" when empty or absent).
      type: dict
      sample: {GPU0: "0"}
    gpu_numa_id:
      description: GPU NUMA ID per GPU ("" when absent).
      type: dict
      sample: {GPU0: "N/A"}
    affinity_columns:
      description: Affinity column headers present in the output.
      type: list
      elements: str
    legend_style:
      description: V(new) (PCIe bridges), V(old) (PCIe switches) or V(none) (no legend printed).
      type: str
    nvlink:
      description:
        - Per GPU (C(GPU<n>)) NVLink state from C(nvidia-smi nvlink -s), when read. Each has
          C(index), C(name), C(uuid), C(supported), C(all_inactive) and C(links), a list of
          C({link, speed_gbps, state}) with state V(active) or V(inactive).
      type: dict
      returned: when nvlink_status is on
    nvlink_errors:
      description:
        - Per GPU error counters from C(nvidia-smi nvlink -e), when read.
          C(links) maps the link number (string) to counters such as C(replay_errors),
          C(recovery_errors), C(crc_errors).
      type: dict
      returned: when nvlink_errors is on
mismatches:
  description: Every failed expectation.
  returned: always
  type: list
  elements: dict
  sample:
    - {item: GPU2-GPU5, check: link_code, expected: NV18, found: NV12}
    - {item: GPU3 link 4, check: nvlinks_active, expected: active, found: inactive}
    - {item: GPU1 nic, check: nic_max_distance, expected: PXB or closer, found: SYS (mlx5_0)}
commands:
  description: The argv lists that were run.
  returned: always
  type: list
  elements: list
'''

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.check_result import from_mismatches, verdict
from ansible.module_utils.gpu_parsers import (ParseError, readable_output, parse_nvlink_errors,
                                              parse_nvlink_status, parse_topo_matrix)
from ansible.module_utils.health_checks import mismatch_msg, verify_topology


def _run(module, argv, commands, what):
    commands.append(argv)
    rc, out, err = module.run_command(argv)
    text = out if (out or '').strip() else err
    if rc != 0 and not (text or '').strip():
        module.fail_json(msg='%s failed (rc=%d): %s'
                         % (' '.join(argv), rc, readable_output(err or out or '').strip()),
                         rc=rc, commands=commands)
    if rc != 0 and what == 'topo':
        module.fail_json(msg='%s failed (rc=%d): %s'
                         % (' '.join(argv), rc, readable_output(err or out).strip()[:300]),
                         rc=rc, commands=commands)
    return text


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvlink_status=dict(type='bool', default=False),
            nvlink_errors=dict(type='bool', default=False),
            nvidia_smi_path=dict(type='path'),
            expected=dict(type='dict', options=dict(
                gpu_count=dict(type='int'),
                nic_count=dict(type='int'),
                link_code=dict(type='str'),
                min_nvlinks=dict(type='int'),
                nic_max_distance=dict(type='str', choices=['PIX', 'PXB', 'PHB', 'NODE', 'SYS']),
                nvlinks_active=dict(type='bool'),
                links_per_gpu=dict(type='int'),
                max_nvlink_errors=dict(type='raw'),
            )),
        ),
        supports_check_mode=True,
    )
    p = module.params
    expected = dict((k, v) for k, v in (p['expected'] or {}).items() if v is not None)
    mne = expected.get('max_nvlink_errors')
    if mne is not None and not isinstance(mne, dict):
        try:
            expected['max_nvlink_errors'] = int(mne)
        except (TypeError, ValueError):
            module.fail_json(msg='expected.max_nvlink_errors must be an integer or a dict, got %r' % (mne,))
    smi = p['nvidia_smi_path'] or module.get_bin_path('nvidia-smi', required=True,
                                                      opt_dirs=['/usr/bin', '/usr/local/bin'])
    commands = []
    try:
        topology = parse_topo_matrix(_run(module, [smi, 'topo', '-m'], commands, 'topo'))
        if p['nvlink_status'] or expected.get('nvlinks_active') or 'links_per_gpu' in expected:
            topology['nvlink'] = parse_nvlink_status(_run(module, [smi, 'nvlink', '-s'], commands, 'nvlink'))
        if p['nvlink_errors'] or 'max_nvlink_errors' in expected:
            errs = parse_nvlink_errors(_run(module, [smi, 'nvlink', '-e'], commands, 'nvlink'))
            for g in errs.values():
                g['links'] = dict((str(k), v) for k, v in g['links'].items())
            topology['nvlink_errors'] = errs
        mismatches = verify_topology(topology, expected)
    except ParseError as e:
        module.fail_json(msg='cannot parse nvidia-smi output: %s' % e, commands=commands)
    evaluated = [('symmetry', 'the same link both ways')] + [
        (k, expected[k]) for k in ('gpu_count', 'nic_count', 'link_code', 'min_nvlinks', 'nic_max_distance',
                                   'nvlinks_active', 'links_per_gpu', 'max_nvlink_errors') if k in expected]
    checks = from_mismatches(mismatches, evaluated)
    result = dict(changed=False, checks=checks, verdict=verdict(checks), topology=topology, mismatches=mismatches,
                  commands=commands)
    if mismatches:
        module.fail_json(msg=mismatch_msg('topology', mismatches), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
