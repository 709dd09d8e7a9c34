# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One GPU health pass, shared by the gpu_health module and the node_exporter timer
(gpu-health-textfile): which read-only commands to run, and what their results mean.

The callers only run the commands (AnsibleModule.run_command, or subprocess) and hand the
(rc, stdout, stderr) of each back; everything else, including every failure message, is here, so an
alert and the readiness report cannot disagree."""

from __future__ import absolute_import, division, print_function

from ansible.module_utils.gpu_parsers import (HEALTH_QUERY_FIELDS, ParseError, parse_health_query,
                                              parse_nvsmi_q, parse_xid_log, readable_output)
from ansible.module_utils.check_result import verdict
from ansible.module_utils.health_checks import evaluate_health, health_check_list, merge_records

__metaclass__ = type

FABRIC_MANAGER_UNIT = 'nvidia-fabricmanager'
_SYSTEMD_STATES = ('active', 'reloading', 'inactive', 'failed', 'activating', 'deactivating', 'maintenance',
                   'refreshing')


def reads(smi=None, dmesg=None, systemctl=None, nvswitch=False):
    """[(key, argv)] of the commands a pass runs. Without smi (NVML read the GPUs) only the rest."""
    out = []
    if smi:
        out += [('query', [smi, '--query-gpu=' + ','.join(HEALTH_QUERY_FIELDS), '--format=csv,noheader,nounits']),
                ('q', [smi, '-q'])]
    if dmesg:
        out.append(('dmesg', [dmesg]))
    if nvswitch and systemctl:
        out.append(('fabric_manager', [systemctl, 'is-active', FABRIC_MANAGER_UNIT]))
    return out


def _smi(tool, result, parser):
    rc, out, err = result
    if rc != 0:
        raise ParseError('%s failed (rc=%d): %s' % (tool, rc, readable_output(err or out).strip()[:300]))
    try:
        return parser(out or '')
    except ParseError as e:
        raise ParseError('cannot parse %s output: %s' % (tool, e))


def kernel_log(result=None, path=None):
    """(text, error): the kernel log from dmesg's result or a file; error says why it could not be read."""
    if path:
        try:
            with open(path, 'rb') as f:
                return f.read().decode('utf-8', 'replace'), None
        except (IOError, OSError) as e:
            return None, 'cannot read kernel log %s: %s' % (path, e)
    if result is None:
        return None, 'dmesg not found'
    rc, out, err = result
    if rc != 0:
        return None, 'dmesg failed (rc=%d: %s)' % (rc, readable_output(err or out).strip()[:200])
    return readable_output(out), None


def fabric_manager_state(result):
    """`systemctl is-active` answer, or a reason naming what it printed instead of a unit state."""
    if result is None:
        return None
    rc, out, err = result
    state = readable_output(out).strip()
    if state in _SYSTEMD_STATES:
        return state
    return 'unknown (systemctl is-active rc=%d: %r)' % (rc, readable_output(out or err).strip()[:80])


def evaluate_pass(results, expected, fail_on=('fail',), temperature_margin_c=5, records=None, log_path=None):
    """Grade one pass. results: {key: (rc, stdout, stderr)} for the keys of reads(); records: GPU
    records read otherwise (NVML), in which case query and q are not needed.

    Returns dict(gpus, node, summary, records, xid_events, kernel_log_error, fabric_manager, checks, verdict).
    Raises ParseError naming the tool when nvidia-smi failed or printed what cannot be parsed."""
    if records is None:
        records = _smi('nvidia-smi --query-gpu', results['query'], parse_health_query)
        records = merge_records(records, _smi('nvidia-smi -q', results['q'], parse_nvsmi_q))
    log, log_error = kernel_log(results.get('dmesg'), log_path)
    xid_events = None
    if log is not None:
        try:
            xid_events = parse_xid_log(log)
        except ParseError as e:
            raise ParseError('cannot parse kernel log: %s' % e)
    fabric_manager = fabric_manager_state(results.get('fabric_manager'))
    gpus, node, summary = evaluate_health(records, expected, xid_events, fail_on, temperature_margin_c,
                                          fabric_manager=fabric_manager, kernel_log_error=log_error)
    checks = health_check_list(gpus, node, expected)
    return dict(gpus=gpus, node=node, summary=summary, records=records, xid_events=xid_events,
                kernel_log_error=log_error, fabric_manager=fabric_manager, checks=checks, verdict=verdict(checks))
