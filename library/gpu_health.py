#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: gpu_health
short_description: One-pass health check of every NVIDIA GPU of a node
description:
  - Reads every GPU once and grades a fixed set of checks per GPU as V(ok), V(warn) or V(fail),
    each with a message and the value it looked at.
  - "Primary data path: one C(nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits) call
    (the field list is C(HEALTH_QUERY_FIELDS) in C(module_utils/gpu_parsers.py)) plus C(nvidia-smi -q)
    for what the query fields lack (slowdown and shutdown temperature thresholds)."
  - When the C(pynvml) module (nvidia-ml-py) imports on the node (from O(nvml_path), where the nvidia_driver
    role installs it, or the interpreter's own path), the same values are read through NVML instead and
    nvidia-smi is not run; when NVML fails (no driver, no library) the module warns and uses nvidia-smi.
  - Reads the kernel log (C(dmesg), or O(kernel_log_path)) for C(NVRM Xid) lines and maps them to GPUs
    by PCI bus id. Xid 48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 94, 95, 119, 120,
    140, 143-150 grade V(fail) (reset, drain or RMA); every other Xid (for example 13, 31, 43, 45,
    usually application faults) grades V(warn). If the kernel log cannot be read the module warns and
    grades the xid check V(fail) with the reason.
  - "Per GPU checks: driver_version, persistence_mode, ecc (volatile uncorrectable -> fail, aggregate
    only -> warn), retired_pages (pending -> fail, double-bit count >= expected.max_retired_pages -> fail,
    other double-bit -> warn), row_remap (failure -> fail, pending -> fail (warn with
    expected.row_remap_pending_fail false)), xid, pcie (width below max/expected -> fail, max gen below
    expected -> fail, current above max -> fail, current gen below max/expected -> warn as idle links may
    downshift), temperature (at or above slowdown -> fail, at or above alert -> warn), throttle (HW slowdown,
    HW thermal or HW power brake active -> fail, SW thermal -> warn), power (limit differs from
    expected.power_limit_watts -> warn, draw above limit +5% -> warn), fabric (with expected.nvswitch, state
    Completed and status Success, or on a GPU that reports no fabric registration (pre-Hopper) an active
    C(nvidia-fabricmanager) unit (C(systemctl is-active)), else fail)."
  - "Fails closed: a value a check needs that nvidia-smi does not report (N/A), a value outside what a GPU can
    report (negative or absurd temperature, power, PCIe gen/width, counters), a kernel log that cannot be read
    (dmesg exit code) or a Fabric Manager state that is not active grades that check V(fail) with the field and
    value in its message, never V(ok). Output that is not UTF-8, a truncated table or rows that
    C(--query-gpu) and C(-q) do not agree on fail the module with a message naming the tool."
  - "Node checks: count (fewer or more GPUs than expected, duplicated index, bus id or UUID, or indexes that are
    not 0..n-1 -> fail), driver (one version on all GPUs, matching expected), fabric, and xid for Xid lines of
    devices that are not GPUs."
  - Fails when any check has a severity listed in O(fail_on). Never changes the node.
version_added: "1.0.0"
author:
  - GPU cluster toolkit maintainers
options:
  expected:
    description: Expected values (all optional); usually built from the node's hardware profile.
    type: dict
    suboptions:
      gpu_count:
        description: Number of GPUs the node must have.
        type: int
      driver_version:
        description: Exact driver version, or a prefix such as V(535) or V(535.183).
        type: str
      persistence_mode:
        description: Wanted persistence mode. A mismatch is V(fail) when set, V(warn) (for disabled) when unset.
        type: bool
      pcie:
        description: Expected PCIe link.
        type: dict
        suboptions:
          gen:
            description: PCIe generation.
            type: int
          width:
            description: Lane count.
            type: int
      temperature_alert_c:
        description:
          - Temperature that grades V(warn).
          - Default is the GPU's slowdown threshold minus O(temperature_margin_c).
        type: int
      power_limit_watts:
        description: Power limit every GPU should have; a different limit grades V(warn) (drift).
        type: int
      power_limits_watts:
        description:
          - "Per-GPU power limits, C({index: watts}), when they differ between GPUs; a GPU it names is checked
            against its own limit instead of O(expected.power_limit_watts)."
        type: dict
      nvswitch:
        description: The node has NVSwitches, so Fabric Manager registration must be Completed/Success.
        type: bool
      max_retired_pages:
        description: Double-bit retired pages at which the GPU grades V(fail).
        type: int
        default: 60
      row_remap_pending_fail:
        description: Grade a pending row remap V(fail) (the GPU needs a reset); V(false) grades it V(warn).
        type: bool
        default: true
      memory_repairs_reported:
        description:
          - The GPU reports retired pages or remapped rows. Neither reported grades V(fail) unless this is
            V(false) (a GPU whose driver prints N/A for both; the hardware profile's C(memory_repairs_reported)).
        type: bool
        default: true
      ecc:
        description: The GPU has ECC on; uncorrectable ECC counters not reported grade V(fail) unless V(false).
        type: bool
        default: true
  fail_on:
    description: Severities that make the module fail.
    type: list
    elements: str
    choices: [warn, fail]
    default: [fail]
  temperature_margin_c:
    description: Degrees below the slowdown threshold at which temperature grades V(warn).
    type: int
    default: 5
  textfile_dir:
    description:
      - Directory of the node_exporter textfile collector. When set, writes C(gpu_health.prom) there
        (C(gpu_health_check_status{gpu,check,severity}), C(gpu_health_ok), C(gpu_health_checks{severity}))
        atomically (temporary file in the same directory, then rename). Not written in check mode.
    type: path
  kernel_log_path:
    description: Read this file for Xid lines instead of running C(dmesg).
    type: path
  nvidia_smi_path:
    description: Path to C(nvidia-smi). Default is to search C(PATH).
    type: path
  use_nvml:
    description: Use NVML through pynvml when it imports. Set V(false) to always use nvidia-smi.
    type: bool
    default: true
  nvml_path:
    description: Directory searched first for pynvml (nvidia-ml-py installed with pip --target).
    type: path
    default: /usr/local/lib/nvidia-ml-py/current
notes:
  - Supports check mode (the checks run; only the textfile is not written).
  - Writing the metrics file does not count as a change; the module always returns C(changed=false).
requirements:
  - nvidia-smi (NVIDIA driver), or the nvidia-ml-py Python package on the node
seealso:
  - module: nvlink_topology
  - module: gpu_settings
'''

EXAMPLES = r'''
- name: Check the GPUs of an HGX H100 node
  gpu_health:
    expected:
      gpu_count: 8
      driver_version: "535"
      pcie: {gen: 5, width: 16}
      power_limit_watts: 700
      nvswitch: true
    textfile_dir: /var/lib/node_exporter/textfile
  register: __gpu_health

- name: Fail on warnings too, reading a saved kernel log
  gpu_health:
    fail_on: [warn, fail]
    kernel_log_path: /var/log/kern.log
'''

RETURN = r'''
---
checks:
  description:
    - Every check, in the one result format of the toolkit's check modules (docs/DESIGN.md, "Check results").
    - One entry per GPU and registered check (subject V(GPU<index>)) and per node check (subject V(node)).
  returned: always (also on failure) once nvidia-smi's output was read
  type: list
  elements: dict
  contains:
    name: {description: Check name (V(ecc), V(pcie), V(fabric), ...)., type: str}
    subject: {description: What was checked (V(GPU3), V(node))., type: str}
    status: {description: V(ok), V(warn) or V(fail)., type: str}
    measured: {description: The values read (any type)., type: raw}
    expected: {description: What they were compared against (any type; null when nothing was expected)., type: raw}
    reason: {description: Why the status, naming the tool field and value where one is at fault., type: str}
  sample:
    - {name: pcie, subject: GPU0, status: fail, measured: {gen_current: 5, gen_max: 5, width_current: 8,
       width_max: 16}, expected: {gen: 5, width: 16}, reason: "PCIe width x8, expected x16"}
verdict:
  description: The worst status in RV(checks) (V(fail) when there is none).
  returned: always once nvidia-smi's output was read
  type: str
  sample: ok
gpus:
  description: One entry per GPU.
  returned: always (also on failure)
  type: list
  elements: dict
  contains:
    index:
      description: nvidia-smi index.
      type: int
    name:
      description: Product name.
      type: str
      sample: NVIDIA H100 80GB HBM3
    uuid:
      description: GPU UUID.
      type: str
    bus_id:
      description: PCI bus id, normalised to C(dddd:bb:dd.f) lower case.
      type: str
      sample: "0000:19:00.0"
    checks:
      description: "Map check name -> C({severity, message, value}) for driver_version, persistence_mode, ecc,
        retired_pages, row_remap, xid, pcie, temperature, throttle, power, fabric."
      type: dict
node:
  description: Node checks (count, driver, fabric, optionally xid), same shape as a GPU's checks.
  returned: always
  type: dict
summary:
  description: Counts per severity and the checks that are not ok.
  returned: always
  type: dict
  contains:
    ok:
      description: Number of ok checks.
      type: int
    warn:
      description: Number of warn checks.
      type: int
    fail:
      description: Number of fail checks.
      type: int
    failed_checks:
      description: Checks graded fail, as C("GPU3 ecc") or C("node count").
      type: list
      elements: str
    warned_checks:
      description: Checks graded warn.
      type: list
      elements: str
    fail_on_hits:
      description: Checks at a O(fail_on) severity with their messages.
      type: list
      elements: str
    verdict:
      description: V(ok), V(warn) or V(fail) (worst severity).
      type: str
source:
  description: V(nvml) or V(nvidia-smi).
  returned: always
  type: str
records:
  description: The raw values read per GPU (the common record used by the checks).
  returned: always
  type: list
  elements: dict
xid_events:
  description: Parsed Xid lines (bus_id, xid, severity, message, line); null when the log was unreadable.
  returned: always
  type: list
  elements: dict
fabric_manager:
  description:
    - C(systemctl is-active nvidia-fabricmanager) (V(active), V(inactive), V(failed), ...), read when
      O(expected.nvswitch) is set; null otherwise.
  returned: always
  type: str
textfile:
  description: Path of the metrics file written (or that would be written in check mode).
  returned: when textfile_dir is set
  type: str
commands:
  description: The argv lists that were run.
  returned: always
  type: list
  elements: list
'''

import os
import sys
import tempfile

from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu_nvml import gather_nvml
from ansible.module_utils.gpu_health_pass import evaluate_pass, reads
from ansible.module_utils.gpu_parsers import ParseError
from ansible.module_utils.health_checks import render_prometheus


def _import_pynvml():
    try:
        import pynvml  # pylint: disable=import-outside-toplevel
        return pynvml
    except Exception:  # noqa: BLE001 - any import failure means: no NVML
        return None


def run_concurrently(module, argvs):
    """Run independent read-only commands at once: each nvidia-smi call pays driver (or here,
    interpreter) start-up, so overlapping them keeps a health pass close to one call's latency."""
    if len(argvs) == 1:
        return [module.run_command(argvs[0])]
    with ThreadPoolExecutor(max_workers=len(argvs)) as pool:
        return list(pool.map(module.run_command, argvs))


def write_textfile(module, directory, content):
    path = os.path.join(directory, 'gpu_health.prom')
    if module.check_mode:
        return path
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix='.gpu_health.', suffix='.prom.tmp')
        with os.fdopen(fd, 'w') as f:
            f.write(content)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except (IOError, OSError) as e:
        module.fail_json(msg='cannot write metrics to %s: %s' % (path, e))
    return path


def main():
    module = AnsibleModule(
        argument_spec=dict(
            expected=dict(type='dict', options=dict(
                gpu_count=dict(type='int'),
                driver_version=dict(type='str'),
                persistence_mode=dict(type='bool'),
                pcie=dict(type='dict', options=dict(gen=dict(type='int'), width=dict(type='int'))),
                temperature_alert_c=dict(type='int'),
                power_limit_watts=dict(type='int'),
                power_limits_watts=dict(type='dict'),
                nvswitch=dict(type='bool'),
                max_retired_pages=dict(type='int', default=60),
                row_remap_pending_fail=dict(type='bool', default=True),
                memory_repairs_reported=dict(type='bool', default=True),
                ecc=dict(type='bool', default=True),
            )),
            fail_on=dict(type='list', elements='str', choices=['warn', 'fail'], default=['fail']),
            temperature_margin_c=dict(type='int', default=5),
            textfile_dir=dict(type='path'),
            kernel_log_path=dict(type='path'),
            nvidia_smi_path=dict(type='path'),
            use_nvml=dict(type='bool', default=True),
            nvml_path=dict(type='path', default='/usr/local/lib/nvidia-ml-py/current'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    expected = dict((k, v) for k, v in (p['expected'] or {}).items() if v is not None)
    if 'pcie' in expected:
        expected['pcie'] = dict((k, v) for k, v in expected['pcie'].items() if v is not None)
    if p['use_nvml'] and p['nvml_path'] and os.path.isdir(p['nvml_path']) and p['nvml_path'] not in sys.path:
        sys.path.insert(0, p['nvml_path'])
    pynvml = _import_pynvml() if p['use_nvml'] else None
    records = None
    source = 'nvidia-smi'
    if pynvml is not None:
        try:
            records = gather_nvml(pynvml)
            source = 'nvml'
        except Exception as e:  # noqa: BLE001 - NVML errors fall back to nvidia-smi
            module.warn('NVML failed (%s); using nvidia-smi' % e)
            records = None
    smi = None
    if records is None:
        smi = p['nvidia_smi_path'] or module.get_bin_path('nvidia-smi', required=True,
                                                          opt_dirs=['/usr/bin', '/usr/local/bin'])
    dmesg = None if p['kernel_log_path'] else module.get_bin_path('dmesg', required=False)
    systemctl = module.get_bin_path('systemctl', required=False)
    keyed = reads(smi, dmesg, systemctl, expected.get('nvswitch'))
    commands = [argv for _key, argv in keyed]
    outputs = run_concurrently(module, commands) if commands else []
    try:
        graded = evaluate_pass(dict((key, out) for (key, _argv), out in zip(keyed, outputs)), expected,
                               p['fail_on'], p['temperature_margin_c'], records=records,
                               log_path=p['kernel_log_path'])
    except ParseError as e:
        module.fail_json(msg=str(e), commands=commands)
    if graded['kernel_log_error']:
        module.warn('%s; Xid not checked' % graded['kernel_log_error'])
    gpus, node, summary = graded['gpus'], graded['node'], graded['summary']
    result = dict(changed=False, checks=graded['checks'], verdict=graded['verdict'], gpus=gpus, node=node,
                  summary=summary, source=source, records=graded['records'],
                  xid_events=graded['xid_events'], fabric_manager=graded['fabric_manager'], commands=commands)
    if p['textfile_dir']:
        result['textfile'] = write_textfile(module, p['textfile_dir'],
                                            render_prometheus(gpus, node, summary, p['fail_on']))
    if summary['fail_on_hits']:
        hits = summary['fail_on_hits']
        module.fail_json(msg='gpu_health: %d check%s at %s: %s' % (
            len(hits), '' if len(hits) == 1 else 's', '/'.join(p['fail_on']), '; '.join(hits)), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
