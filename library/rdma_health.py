#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: rdma_health
short_description: Check RDMA (InfiniBand / RoCE) ports from sysfs
description:
  - For every RDMA device under O(infiniband_root) and each of its ports, reads C(state), C(phys_state),
    C(rate), C(link_layer), the netdev (C(gid_attrs/ndevs/<gid_index>), falling back to
    C(<dev>/device/net/*)), the netdev MTU (C(<net_root>/<netdev>/mtu)), the GID at the expected index
    (C(gids/<i>)) and its type (C(gid_attrs/types/<i>)).
  - The active MTU comes from C(ibv_devinfo -d <dev>) when that tool is on C(PATH); otherwise it is
    derived from the netdev MTU the way RoCE does it (largest IB MTU 256/512/1024/2048/4096 that fits
    the netdev MTU minus 96 bytes of RoCE headers).
  - Grades each port against O(expected) and fails listing every mismatch. Read-only.
version_added: "1.0.0"
author:
  - GPU cluster toolkit maintainers
options:
  infiniband_root:
    description: Directory holding the RDMA devices.
    type: path
    default: /sys/class/infiniband
  net_root:
    description: Directory holding the network interfaces.
    type: path
    default: /sys/class/net
  devices:
    description: Only check these RDMA devices (for example V(mlx5_0)). Default is every device found.
    type: list
    elements: str
  use_ibv_devinfo:
    description: Ask C(ibv_devinfo) for the active MTU when it is installed.
    type: bool
    default: true
  expected:
    description: Expected port values (all optional).
    type: dict
    suboptions:
      state:
        description: Port state name, for example V(ACTIVE). Without it the state must be ACTIVE.
        type: str
      link_layer:
        description: V(Ethernet) (RoCE) or V(InfiniBand).
        type: str
      netdev_mtu:
        description: MTU of the port's network interface.
        type: int
      active_mtu:
        description: Active RDMA MTU (256, 512, 1024, 2048 or 4096).
        type: int
      min_rate_gbps:
        description: Lowest acceptable port rate in Gb/s.
        type: int
      gid_index:
        description: GID table index to read (the RoCE v2 GID NCCL uses, commonly 3).
        type: int
        default: 0
      gid_type:
        description: Type the GID at O(expected.gid_index) must have, for example V(RoCE v2).
        type: str
      port_count:
        description: Total number of ports checked.
        type: int
      qos_trust:
        description: >-
          NIC trust mode every port's netdev must report through C(mlnx_qos -i <netdev>) (V(dscp) for lossless
          RoCE). Set, with O(expected.pfc_priorities), only where DOCA-OFED's tools are installed: a port whose
          C(mlnx_qos) is missing, fails or prints what the parser cannot account for fails.
        type: str
        choices: [pcp, dscp]
      pfc_priorities:
        description: The priorities that must have PFC enabled, and no other (for example V([3])).
        type: list
        elements: int
  mlnx_qos_path:
    description: Path to C(mlnx_qos). Default is to search C(PATH).
    type: path
notes:
  - Supports check mode; the module only reads.
requirements:
  - Linux sysfs with the RDMA subsystem (rdma-core), optionally ibv_devinfo
'''

EXAMPLES = r'''
- name: Check the RoCE rails
  rdma_health:
    devices: [mlx5_0, mlx5_1, mlx5_2, mlx5_3]
    expected:
      state: ACTIVE
      link_layer: Ethernet
      netdev_mtu: 9000
      active_mtu: 4096
      min_rate_gbps: 200
      gid_index: 3
      gid_type: RoCE v2
      port_count: 4

- name: Check the lab's simulated tree
  rdma_health:
    infiniband_root: /opt/gpusim/sys/class/infiniband
'''

RETURN = r'''
---
checks:
  description:
    - Every check, in the one result format of the toolkit's check modules (docs/DESIGN.md, "Check results").
    - "One per device port and check (subject V(<device>/<port>)), one per node check (subject V(node)), and a fail (name V(present)) per device in O(devices) that is absent."
  returned: once sysfs was read (also on mismatch)
  type: list
  elements: dict
  contains:
    name: {description: Check name., type: str}
    subject: {description: "What was checked (V(mlx5_0/1), V(node)).", type: str}
    status: {description: V(ok), V(warn) or V(fail)., type: str}
    measured: {description: The value read (any type)., type: raw}
    expected: {description: What it was compared against (any type; null when nothing was expected)., type: raw}
    reason: {description: Why the status, naming the tool field and value where one is at fault., type: str}
verdict:
  description: The worst status in RV(checks) (V(fail) when there is none).
  returned: once sysfs was read (also on mismatch)
  type: str
  sample: ok
ports:
  description: One entry per device port.
  returned: always (also on failure)
  type: list
  elements: dict
  contains:
    device:
      description: RDMA device.
      type: str
      sample: mlx5_0
    port:
      description: Port number.
      type: int
    state:
      description: Raw state.
      type: str
      sample: "4: ACTIVE"
    state_name:
      description: State name.
      type: str
      sample: ACTIVE
    phys_state:
      description: Raw physical state.
      type: str
      sample: "5: LinkUp"
    rate:
      description: Raw rate.
      type: str
      sample: "200 Gb/sec (4X HDR)"
    rate_gbps:
      description: Rate in Gb/s.
      type: float
    link_layer:
      description: Ethernet or InfiniBand.
      type: str
    netdev:
      description: Network interface of the port (null when none).
      type: str
    netdev_mtu:
      description: MTU of the netdev.
      type: int
    active_mtu:
      description: Active RDMA MTU.
      type: int
    active_mtu_source:
      description: V(ibv_devinfo), V(derived) (from the netdev MTU) or V(none).
      type: str
    gid_index:
      description: GID index read.
      type: int
    gid:
      description: GID at that index.
      type: str
    gid_type:
      description: GID type, for example C(RoCE v2).
      type: str
    qos:
      description: >-
        What C(mlnx_qos -i <netdev>) reported (C({trust, pfc, dcbx}), C(pfc) eight 0/1 values by priority),
        when O(expected.qos_trust) or O(expected.pfc_priorities) asked for it and the output parsed.
      type: dict
    checks:
      description: Map check name -> C({severity, message, value}).
      type: dict
summary:
  description: Counts per severity, C(failed_checks) (C("mlx5_0/1 netdev_mtu")) and C(verdict).
  returned: always
  type: dict
mismatches:
  description: List of C({item, check, expected, found}), item is C(<device>/<port>) or C(node).
  returned: always
  type: list
  elements: dict
commands:
  description: The argv lists that were run.
  returned: always
  type: list
  elements: list
'''

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.check_result import check, from_severity_map, verdict
from ansible.module_utils.gpu_parsers import ParseError
from ansible.module_utils.health_checks import evaluate_port, evaluate_qos, mismatch_msg, summarize
from ansible.module_utils.rdma_parsers import (parse_ibv_devinfo_mtu, parse_mlnx_qos, parse_sysfs_rate, parse_sysfs_state,
                                               roce_active_mtu)


def _read(path):
    """A sysfs attribute's text, None when it cannot be read; bytes that are not UTF-8 are a ParseError
    naming the file (a reading we cannot account for, not a traceback)."""
    try:
        with open(path, 'rb') as f:
            raw = f.read()
    except (IOError, OSError):
        return None
    try:
        return raw.decode('utf-8').strip()
    except UnicodeDecodeError:
        raise ParseError('%s holds bytes that are not UTF-8: %r' % (path, raw[:64]))


def read_port(ib_root, net_root, dev, port, gid_index):
    base = os.path.join(ib_root, dev, 'ports', str(port))
    what = '%s port %s' % (dev, port)
    state = _read(os.path.join(base, 'state'))
    if state is None:
        raise ParseError('%s: cannot read %s' % (what, os.path.join(base, 'state')))
    phys = _read(os.path.join(base, 'phys_state'))
    rate = _read(os.path.join(base, 'rate'))
    out = {
        'device': dev, 'port': port, 'state': state,
        'state_name': parse_sysfs_state(state, what + ' state')[1],
        'phys_state': phys,
        'phys_state_name': parse_sysfs_state(phys, what + ' phys_state')[1] if phys else None,
        'rate': rate, 'rate_gbps': parse_sysfs_rate(rate, what + ' rate') if rate else None,
        'link_layer': _read(os.path.join(base, 'link_layer')),
        'gid_index': gid_index,
        'gid': _read(os.path.join(base, 'gids', str(gid_index))),
        'gid_type': _read(os.path.join(base, 'gid_attrs', 'types', str(gid_index))),
    }
    netdev = _read(os.path.join(base, 'gid_attrs', 'ndevs', str(gid_index)))
    if not netdev:
        try:
            nets = sorted(os.listdir(os.path.join(ib_root, dev, 'device', 'net')))
        except OSError:
            nets = []
        netdev = nets[0] if nets else None
    out['netdev'] = netdev
    mtu = _read(os.path.join(net_root, netdev, 'mtu')) if netdev else None
    try:
        out['netdev_mtu'] = int(mtu) if mtu is not None else None
    except ValueError:
        raise ParseError('%s: netdev %s mtu is not a number: %r' % (what, netdev, mtu))
    return out


def qos_checks(module, port, expected, path, commands):
    """Reads the port netdev's lossless-RoCE state with `mlnx_qos -i` into port['qos'] and grades it
    (health_checks.evaluate_qos) into port['checks']; returns the mismatches. Fails closed on a missing tool,
    an error or output the parser cannot account for."""
    qos, error = None, None
    binary = path or module.get_bin_path('mlnx_qos')
    if not port.get('netdev'):
        error = 'no netdev behind the port to read its QoS from'
    elif not binary:
        error = 'mlnx_qos is not installed (DOCA-OFED mlnx-tools): cannot read trust and PFC'
    else:
        argv = [binary, '-i', port['netdev']]
        commands.append(argv)
        rc, out, err = module.run_command(argv)
        if rc != 0:
            error = 'mlnx_qos -i %s exited %d: %s' % (port['netdev'], rc, (err or out).strip()[-200:])
        else:
            try:
                qos = port['qos'] = parse_mlnx_qos(out)
            except ParseError as e:
                error = str(e)
    checks, mm = evaluate_qos(port, expected, qos, error)
    port['checks'].update(checks)
    return mm


def main():
    module = AnsibleModule(
        argument_spec=dict(
            infiniband_root=dict(type='path', default='/sys/class/infiniband'),
            net_root=dict(type='path', default='/sys/class/net'),
            devices=dict(type='list', elements='str'),
            use_ibv_devinfo=dict(type='bool', default=True),
            expected=dict(type='dict', options=dict(
                state=dict(type='str'),
                link_layer=dict(type='str'),
                netdev_mtu=dict(type='int'),
                active_mtu=dict(type='int'),
                min_rate_gbps=dict(type='int'),
                gid_index=dict(type='int', default=0),
                gid_type=dict(type='str'),
                port_count=dict(type='int'),
                qos_trust=dict(type='str', choices=['pcp', 'dscp']),
                pfc_priorities=dict(type='list', elements='int'),
            )),
            mlnx_qos_path=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    expected = dict((k, v) for k, v in (p['expected'] or {}).items() if v is not None)
    gid_index = expected.get('gid_index', 0)
    root = p['infiniband_root']
    commands = []
    try:
        found = sorted(os.listdir(root))
    except OSError as e:
        module.fail_json(msg='cannot list RDMA devices in %s: %s' % (root, e))
    devices = p['devices'] or found
    missing = [d for d in devices if d not in found]
    ibv = module.get_bin_path('ibv_devinfo') if p['use_ibv_devinfo'] else None
    ports = []
    mismatches = []
    for d in missing:
        mismatches.append({'item': d, 'check': 'present', 'expected': 'present in %s' % root, 'found': 'absent'})
    try:
        for dev in [d for d in devices if d in found]:
            try:
                nums = sorted(int(x) for x in os.listdir(os.path.join(root, dev, 'ports')) if x.isdigit())
            except OSError as e:
                raise ParseError('%s: cannot list ports: %s' % (dev, e))
            devinfo = None
            if ibv and nums:
                argv = [ibv, '-d', dev]
                commands.append(argv)
                rc, out, err = module.run_command(argv)
                devinfo = out if rc == 0 else None
            for n in nums:
                port = read_port(root, p['net_root'], dev, n, gid_index)
                port['active_mtu'], port['active_mtu_source'] = None, 'none'
                if devinfo is not None:
                    try:
                        port['active_mtu'] = parse_ibv_devinfo_mtu(devinfo, n)
                        port['active_mtu_source'] = 'ibv_devinfo'
                    except ParseError:
                        pass
                if port['active_mtu'] is None and port['netdev_mtu'] is not None:
                    port['active_mtu'] = roce_active_mtu(port['netdev_mtu'])
                    port['active_mtu_source'] = 'derived'
                port['checks'], mm = evaluate_port(port, expected)
                if 'qos_trust' in expected or 'pfc_priorities' in expected:
                    mm += qos_checks(module, port, expected, p['mlnx_qos_path'], commands)
                mismatches.extend(mm)
                ports.append(port)
    except ParseError as e:
        module.fail_json(msg='cannot parse RDMA sysfs: %s' % e, ports=ports, commands=commands)
    node = {}
    if 'port_count' in expected:
        if len(ports) != expected['port_count']:
            node['port_count'] = {'severity': 'fail', 'value': len(ports),
                                  'message': 'found %d ports, expected %d' % (len(ports), expected['port_count'])}
            mismatches.append({'item': 'node', 'check': 'port_count', 'expected': expected['port_count'],
                               'found': len(ports)})
        else:
            node['port_count'] = {'severity': 'ok', 'value': len(ports), 'message': 'found %d ports' % len(ports)}
    if not ports and not missing:
        node['ports'] = {'severity': 'fail', 'value': 0, 'message': 'no RDMA ports under %s' % root}
        mismatches.append({'item': 'node', 'check': 'ports', 'expected': 'at least one port', 'found': 0})
    summary = summarize([('%s/%s' % (x['device'], x['port']), x['checks']) for x in ports] + [('node', node)])
    if missing:
        summary['fail'] += len(missing)
        summary['failed_checks'] += ['%s present' % d for d in missing]
        summary['verdict'] = 'fail'
    checks = [check('present', d, 'fail', 'absent', 'present in %s' % root, '%s is not in %s' % (d, root))
              for d in missing]
    for x in ports:
        checks += from_severity_map('%s/%s' % (x['device'], x['port']), x['checks'], expected)
    checks += from_severity_map('node', node, expected)
    result = dict(changed=False, checks=checks, verdict=verdict(checks), ports=ports, node=node, summary=summary,
                  mismatches=mismatches, commands=commands)
    if mismatches:
        module.fail_json(msg=mismatch_msg('RDMA', mismatches), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
