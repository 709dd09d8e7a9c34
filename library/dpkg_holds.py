#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: dpkg_holds
short_description: Hold (or release) a set of installed packages in one call
description:
  - Sets dpkg's selection of every package in O(names) to O(selection) with one C(dpkg --get-selections) and at
    most one C(dpkg --set-selections), where C(ansible.builtin.dpkg_selections) in a loop runs once per package.
    The driver, CUDA/NCCL and DCGM roles hold whole package sets this way.
  - Only the packages whose selection differs are changed; a converged host reports no change.
  - A package dpkg does not know (not installed) is an error naming it, before anything is changed. In check
    mode, callers skip the task where the same run would install the packages first.
version_added: "1.2.0"
author:
  - GPU cluster toolkit maintainers
options:
  names:
    description: The packages, by name as dpkg knows them.
    type: list
    elements: str
    required: true
  selection:
    description: V(hold) keeps apt from upgrading or removing them; V(install) releases the hold.
    type: str
    choices: [hold, install]
    default: hold
notes:
  - Supports check mode and diff mode.
requirements:
  - dpkg (Debian, Ubuntu)
seealso:
  - module: ansible.builtin.dpkg_selections
'''

EXAMPLES = r'''
- name: Hold the driver packages
  dpkg_holds:
    names: [nvidia-driver-570-open, nvidia-utils-570, libnvidia-compute-570]

- name: Release them
  dpkg_holds:
    names: [nvidia-driver-570-open, nvidia-utils-570, libnvidia-compute-570]
    selection: install
'''

RETURN = r'''
changed_packages:
  description: The packages whose selection was (or in check mode would be) set.
  returned: always
  type: list
  elements: str
  sample: [nvidia-utils-570]
before:
  description: Each package's selection before the call.
  returned: always
  type: dict
  sample: {nvidia-utils-570: install}
'''

from ansible.module_utils.basic import AnsibleModule


def parse_selections(text):
    """`dpkg --get-selections` output -> {package: selection}; the architecture qualifier is dropped."""
    out = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2:
            out[fields[0].split(':')[0]] = fields[1]
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            names=dict(type='list', elements='str', required=True),
            selection=dict(type='str', choices=['hold', 'install'], default='hold'),
        ),
        supports_check_mode=True,
    )
    names = sorted(set(module.params['names']))
    want = module.params['selection']
    dpkg = module.get_bin_path('dpkg', required=True)
    selections = {}
    if names:
        # dpkg prints the known ones on stdout and "no packages found matching X" for the others (rc 0 or 1)
        rc, out, err = module.run_command([dpkg, '--get-selections'] + names)
        selections = parse_selections(out)
        if rc not in (0, 1):
            module.fail_json(msg='dpkg --get-selections failed (rc=%d): %s' % (rc, (err or out).strip()))
    unknown = [n for n in names if n.split(':')[0] not in selections]
    if unknown:
        module.fail_json(msg='dpkg does not know %s: install before setting %s' % (', '.join(unknown), want),
                         unknown=unknown)
    before = dict((n, selections[n.split(':')[0]]) for n in names)
    changed = [n for n in names if before[n] != want]
    result = dict(changed=bool(changed), changed_packages=changed, before=before)
    if module._diff and changed:
        result['diff'] = dict(before=''.join('%s\t%s\n' % (n, before[n]) for n in changed),
                              after=''.join('%s\t%s\n' % (n, want) for n in changed))
    if changed and not module.check_mode:
        data = ''.join('%s %s\n' % (n, want) for n in changed)
        rc, out, err = module.run_command([dpkg, '--set-selections'], data=data)
        if rc != 0:
            module.fail_json(msg='dpkg --set-selections failed (rc=%d): %s' % (rc, (err or out).strip()), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
