#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: fabric_probe
short_description: Ping every peer on every rail with a full-size don't-fragment frame, all at once
description:
  - Runs one C(ping -n -M do -s <payload> -c 1 -W <timeout> -I <source address> <peer address>) per target,
    up to O(concurrency) at a time, in one module call per node instead of one task per peer and rail.
  - Returns the counts and only the failing targets, each with ping's exit status and output, so the
    controller never holds a result for a pair that passed. The C(fabric_report) filter turns the result
    into the node's fabric report and C(fabric_verdict) attributes failures across the cluster.
  - A ping that cannot be started, or that has not exited O(timeout) + 5 seconds after it started, is a
    failing target with that reason, never a pass.
  - Read-only: runs the same in check mode.
version_added: "1.1.0"
author:
  - GPU cluster toolkit maintainers
options:
  targets:
    description:
      - What to probe, as the C(fabric_ping_targets) filter makes it, one entry per rail and peer.
      - Each needs C(src_addr), C(dst_addr) and C(payload) (ICMP payload bytes, the rail MTU minus 28);
        every other key (C(rail), C(src), C(dst), C(src_if), C(mtu)) is returned with a failure as it came.
    type: list
    elements: dict
    required: true
  timeout:
    description: Seconds each ping waits for its one reply (C(ping -W)).
    type: int
    default: 1
  concurrency:
    description: Most pings running at once.
    type: int
    default: 64
  retries:
    description:
      - How many more times a failing target is probed, with at most an eighth of O(concurrency) at once, before
        it counts as failed. Every ping's socket receives every reply to the node, so a burst of thousands
        (a thousand peers on eight rails) drops a few replies on a healthy fabric; a real fault fails every try.
      - V(0) reports the first failure.
    type: int
    default: 1
    version_added: "1.4.0"
  ping_path:
    description: Path to C(ping) (iputils). Default is to search C(PATH).
    type: path
notes:
  - Supports check mode (read-only).
requirements:
  - ping from iputils (C(-M do) sets don't-fragment)
seealso:
  - module: rdma_health
'''

EXAMPLES = r'''
- name: Ping every peer on every rail
  fabric_probe:
    targets: "{{ plan | fabric_ping_targets(hostvars, ansible_play_hosts, inventory_hostname) }}"
    timeout: 1
  register: probe
'''

RETURN = r'''
pairs_checked:
  description: Number of targets probed.
  returned: always
  type: int
  sample: 10
pairs_ok:
  description: Number of targets that answered.
  returned: always
  type: int
  sample: 8
retried:
  description: Number of targets that failed at first and were probed again (see O(retries)).
  returned: always
  type: int
  sample: 2
  version_added: "1.4.0"
results:
  description: The failing targets only, each as C(item) (the target as given), C(rc), C(stdout) and C(stderr).
  returned: always
  type: list
  elements: dict
  sample:
    - item: {rail: rail0, src: gpu-a1, dst: gpu-a2, src_addr: 198.18.1.11, dst_addr: 198.18.1.12, payload: 8972}
      rc: 1
      stdout: "ping: local error: message too long, mtu=1500"
      stderr: ""
'''

import subprocess
import time

from ansible.module_utils.basic import AnsibleModule

GRACE_SECONDS = 5


def _text(data):
    return (data or b'').decode('utf-8', errors='replace')


def _argv(ping, target, timeout):
    return [ping, '-n', '-M', 'do', '-s', str(int(target['payload'])), '-c', '1', '-W', str(timeout),
            '-I', str(target['src_addr']), str(target['dst_addr'])]


def probe(targets, ping, timeout, concurrency, popen=subprocess.Popen, clock=time.monotonic, sleep=time.sleep):
    """Run every target's ping, at most `concurrency` at once; returns the failing ones, in target order."""
    outcome = [None] * len(targets)
    waiting = list(range(len(targets)))
    running = {}
    while waiting or running:
        while waiting and len(running) < concurrency:
            i = waiting.pop(0)
            try:
                running[i] = (popen(_argv(ping, targets[i], timeout), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, stdin=subprocess.DEVNULL), clock())
            except OSError as exc:
                outcome[i] = {'rc': None, 'stdout': '', 'stderr': 'ping could not start: %s' % exc}
        for i, (proc, started) in list(running.items()):
            if proc.poll() is None:
                if clock() - started <= timeout + GRACE_SECONDS:
                    continue
                proc.kill()
                out, err = proc.communicate()
                outcome[i] = {'rc': None, 'stdout': _text(out),
                              'stderr': 'ping did not exit within %d s' % (timeout + GRACE_SECONDS)}
            else:
                out, err = proc.communicate()
                outcome[i] = {'rc': proc.returncode, 'stdout': _text(out), 'stderr': _text(err)}
            del running[i]
        if running:
            sleep(0.02)
    return [dict(outcome[i], item=targets[i]) for i in range(len(targets)) if outcome[i]['rc'] != 0]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            targets=dict(type='list', elements='dict', required=True),
            timeout=dict(type='int', default=1),
            concurrency=dict(type='int', default=64),
            ping_path=dict(type='path'),
            retries=dict(type='int', default=1),
        ),
        supports_check_mode=True,
    )
    targets, timeout, concurrency = module.params['targets'], module.params['timeout'], module.params['concurrency']
    retries = module.params['retries']
    if timeout < 1 or concurrency < 1:
        module.fail_json(msg='timeout and concurrency must be at least 1, got %r and %r' % (timeout, concurrency))
    if retries < 0:
        module.fail_json(msg='retries must be 0 or more, got %r' % retries)
    for n, target in enumerate(targets):
        missing = [k for k in ('src_addr', 'dst_addr', 'payload') if target.get(k) in (None, '')]
        if missing:
            module.fail_json(msg='target %d (%r) has no %s' % (n, target, ', '.join(missing)))
        try:
            if int(target['payload']) < 0:
                raise ValueError
        except (TypeError, ValueError):
            module.fail_json(msg='target %d: payload must be a whole number of bytes, got %r' % (n, target['payload']))
    ping = module.params['ping_path'] or module.get_bin_path('ping', required=True)
    failures = probe(targets, ping, timeout, concurrency)
    retried = len(failures)
    for _ in range(retries):
        if not failures:
            break
        failures = probe([f['item'] for f in failures], ping, timeout, max(1, concurrency // 8))
    module.exit_json(changed=False, pairs_checked=len(targets), pairs_ok=len(targets) - len(failures),
                     retried=retried, results=failures)


if __name__ == '__main__':
    main()
