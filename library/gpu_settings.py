#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: gpu_settings
short_description: Set persistence mode, power limit and application clocks of NVIDIA GPUs
description:
  - Reads the current settings of every GPU with one C(nvidia-smi --query-gpu=index,persistence_mode,
    power.limit,power.min_limit,power.max_limit,clocks.applications.memory,clocks.applications.graphics
    --format=csv,noheader,nounits) call, then changes only what differs, per GPU, with
    C(nvidia-smi -i <n> -pm 1|0), C(nvidia-smi -i <n> -pl <watts>) and C(nvidia-smi -i <n> -ac <mem>,<gfx>).
  - Every requested power limit is checked against the GPU's min/max limits before anything is changed;
    one out-of-range value fails the task with nothing changed.
  - Power limits are compared as integer watts (nvidia-smi prints V(700.00)).
  - In check mode reports what would change without running any setter. Supports diff mode.
  - These settings are lost at reboot or driver reload; the role that calls this module also installs
    a oneshot unit that re-applies them.
version_added: "1.0.0"
author:
  - GPU cluster toolkit maintainers
options:
  persistence_mode:
    description: Wanted persistence mode of every GPU. Unset leaves it alone.
    type: bool
  power_limit_watts:
    description:
      - "Power limit in watts, either one integer for every GPU or a dict from GPU index to watts
        (for example C({0: 650, 1: 700}))."
      - Mutually exclusive with O(node_power_budget_watts).
    type: raw
  node_power_budget_watts:
    description: Split this budget evenly across all GPUs (floored to whole watts per GPU).
    type: int
  application_clocks:
    description: Application clocks for every GPU.
    type: dict
    suboptions:
      memory_mhz:
        description: Memory clock in MHz.
        type: int
        required: true
      graphics_mhz:
        description: Graphics clock in MHz.
        type: int
        required: true
  nvidia_smi_path:
    description: Path to C(nvidia-smi). Default is to search C(PATH).
    type: path
notes:
  - Supports check mode and diff mode.
requirements:
  - nvidia-smi (NVIDIA driver), run as root
seealso:
  - module: gpu_health
'''

EXAMPLES = r'''
- name: Enable persistence mode and cap every GPU at 600 W
  gpu_settings:
    persistence_mode: true
    power_limit_watts: 600

- name: Per-GPU limits
  gpu_settings:
    power_limit_watts:
      0: 650
      1: 700

- name: Share a 5 kW budget across the node's GPUs
  gpu_settings:
    node_power_budget_watts: 5000

- name: Pin application clocks
  gpu_settings:
    application_clocks:
      memory_mhz: 2619
      graphics_mhz: 1980
'''

RETURN = r'''
---
changes:
  description: What was (or in check mode would be) changed.
  returned: always
  type: list
  elements: dict
  sample:
    - {gpu: 3, setting: power_limit_watts, before: 700, after: 600, argv: [/usr/bin/nvidia-smi, -i, "3", -pl, "600"]}
gpus:
  description: Settings per GPU after the run (as read before, with the changes applied).
  returned: always
  type: dict
  sample:
    GPU0:
      persistence_mode: true
      power_limit_watts: 600
      application_clocks: {memory_mhz: null, graphics_mhz: null}
diff:
  description: Ansible diff, C(before) and C(after) per GPU.
  returned: always
  type: dict
  contains:
    before:
      description: Settings before.
      type: dict
    after:
      description: Settings after.
      type: dict
commands:
  description: The argv lists that were run (read and setters).
  returned: always
  type: list
  elements: list
'''

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu_parsers import (SETTINGS_QUERY_FIELDS, ParseError, parse_settings_query,
                                              readable_output)
from ansible.module_utils.health_checks import desired_power, plan_settings


def main():
    module = AnsibleModule(
        argument_spec=dict(
            persistence_mode=dict(type='bool'),
            power_limit_watts=dict(type='raw'),
            node_power_budget_watts=dict(type='int'),
            application_clocks=dict(type='dict', options=dict(
                memory_mhz=dict(type='int', required=True),
                graphics_mhz=dict(type='int', required=True),
            )),
            nvidia_smi_path=dict(type='path'),
        ),
        mutually_exclusive=[('power_limit_watts', 'node_power_budget_watts')],
        supports_check_mode=True,
    )
    p = module.params
    plw = p['power_limit_watts']
    if plw is not None and not isinstance(plw, dict):
        try:
            plw = int(plw)
        except (TypeError, ValueError):
            module.fail_json(msg='power_limit_watts must be an integer or a dict of GPU index to watts, got %r'
                             % (plw,))
    smi = p['nvidia_smi_path'] or module.get_bin_path('nvidia-smi', required=True,
                                                      opt_dirs=['/usr/bin', '/usr/local/bin'])
    argv = [smi, '--query-gpu=' + ','.join(SETTINGS_QUERY_FIELDS), '--format=csv,noheader,nounits']
    commands = [argv]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg='nvidia-smi --query-gpu failed (rc=%d): %s'
                         % (rc, readable_output(err or out).strip()[:300]),
                         commands=commands)
    try:
        current = parse_settings_query(out)
    except ParseError as e:
        module.fail_json(msg='cannot parse nvidia-smi --query-gpu output: %s' % e, commands=commands)
    try:
        power = desired_power(current, plw, p['node_power_budget_watts'])
    except ValueError as e:
        module.fail_json(msg=str(e), commands=commands)
    changes, errors, before, after = plan_settings(current, p['persistence_mode'], power, p['application_clocks'])
    if errors:
        module.fail_json(msg='; '.join(errors), changed=False, commands=commands,
                         diff={'before': before, 'after': before})
    for c in changes:
        c['argv'] = [smi, '-i', str(c['gpu'])] + c.pop('args')
    if not module.check_mode:
        for c in changes:
            commands.append(c['argv'])
            rc, out, err = module.run_command(c['argv'])
            if rc != 0:
                done = [x for x in changes if x is not c and x['argv'] in commands]
                module.fail_json(msg='GPU%d: setting %s to %s failed (rc=%d): %s' % (
                    c['gpu'], c['setting'], c['after'], rc, readable_output(err or out).strip()[:300]),
                    changed=bool(done), changes=done, commands=commands)
    module.exit_json(changed=bool(changes), changes=changes, gpus=after, diff={'before': before, 'after': after},
                     commands=commands)


if __name__ == '__main__':
    main()
