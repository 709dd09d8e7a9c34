# -*- coding: utf-8 -*-
"""Check modules called as Ansible calls them, on mutations of the recorded outputs of a node:

- the result is always one ansible-core can read (JSON, valid UTF-8), never a traceback;
- a mutation that makes a checked value unaccountable (a number replaced by N/A, garbage or an absurd
  magnitude, a truncated table, a dropped or duplicated row, undecodable bytes) never yields `ok`: the
  module fails with a reason or grades `fail`, unless the values the checks read are exactly the
  recorded ones."""

import json
import os
import sys

import dcgm_diag
import gpu_health
import nccl_bandwidth
import nvlink_topology
import pytest
import yaml
from ansible.module_utils.gpu_parsers import HEALTH_QUERY_FIELDS, parse_nvsmi_q, parse_query_csv
from conftest import ROOT
sys.path.insert(0, os.path.join(ROOT, "filter_plugins"))
from node_plan import gpu_health_expected
from helpers import fixture, run_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mutations import mutations

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
# Mutations that make a value unaccountable; swaps of two plausible cells can yield another plausible
# reading (41 C and 69.85 W swapped), which no parser can tell from the real thing.
UNACCOUNTABLE = ('replace_number', 'truncate', 'drop_line', 'duplicate_line', 'non_utf8')
H100 = 'derived/hgx-h100-8gpu/'
H100_EXPECTED = {'gpu_count': 8, 'driver_version': '590', 'persistence_mode': True, 'nvswitch': True,
                 'pcie': {'gen': 5, 'width': 16}, 'power_limit_watts': 700}


def health_query(name):
    rows = parse_query_csv(fixture(name))
    return ''.join(', '.join(row[f] for f in HEALTH_QUERY_FIELDS) + '\n' for row in rows)


# The lab's H100 node answers -q from this capture (lab/simulator/derive.py: H100_Q8).
QUERY, Q = health_query(H100 + 'query_gpu.csv'), fixture('gpud/nvidia-smi-query.535.161.08.out.0.valid')


@pytest.fixture(autouse=True)
def no_pynvml(monkeypatch):
    monkeypatch.setattr(gpu_health, '_import_pynvml', lambda: None)


def run_health(query=QUERY, q=Q, dmesg=(0, '', '')):
    return run_module(gpu_health.main, {'expected': H100_EXPECTED}, {
        (lambda a: len(a) > 1 and a[1].startswith('--query-gpu=')): (0, query, ''),
        ('-q',): (0, q, ''),
        (lambda a: a == ['/usr/bin/dmesg']): dmesg,
    })


def readable(result):
    """What ansible-core does with a module's result: JSON, then UTF-8."""
    json.dumps(result, ensure_ascii=False).encode('utf-8')


def test_recorded_h100_node_is_ok_on_every_check():
    res, failed, _ = run_health()
    assert not failed, res.get('msg')
    assert res['summary']['verdict'] == 'ok' and res['summary']['warn'] == 0, res['summary']


BASELINE = None


def baseline_records():
    global BASELINE  # pylint: disable=global-statement
    if BASELINE is None:
        BASELINE = run_health()[0]['records']
    return BASELINE


def unaccounted_changes(records):
    """Values the checks read that differ from the recording, other than ones nvidia-smi -q reports for
    the same GPU (the module fills what --query-gpu lacks from -q). The product name and shutdown
    threshold are only reported, not checked."""
    q_by_bus = dict((r['bus_id'], r) for r in parse_nvsmi_q(Q))
    base = baseline_records()
    changes = []
    if len(records) != len(base):
        return [('rows', len(base), len(records))]
    for rec, was in zip(records, base):
        for k, v in rec.items():
            if k in ('name', 'shutdown_temp_c') or v == was.get(k):
                continue
            if v is not None and q_by_bus.get(rec.get('bus_id'), {}).get(k) == v:
                continue
            changes.append((rec.get('index'), k, was.get(k), v))
    return changes


def assert_fails_closed(res, failed, kind, description):
    readable(res)
    if failed:
        assert res.get('msg'), 'failed without a reason (%s)' % description
        return
    changes = unaccounted_changes(res['records'])
    if kind in UNACCOUNTABLE and changes:
        assert res['summary']['verdict'] == 'fail', (
            '%s: %s graded %s; changed values %s' % (kind, description, res['summary']['verdict'], changes[:5]))


@SETTINGS
@given(mutation=mutations(QUERY))
def test_gpu_health_query_mutations_fail_closed(mutation):
    kind, description, text = mutation
    res, failed, _ = run_health(query=text)
    assert_fails_closed(res, failed, kind, description)


@SETTINGS
@given(mutation=mutations(Q))
def test_gpu_health_q_mutations_fail_closed(mutation):
    kind, description, text = mutation
    res, failed, _ = run_health(q=text)
    assert_fails_closed(res, failed, kind, description)


@SETTINGS
@given(at=st.integers(0, 400))
def test_gpu_health_undecodable_kernel_log_is_read(at):
    log = fixture('gpud/dmesg-with-xid-119.log')
    res, failed, _ = run_health(dmesg=(0, log[:at] + '\udcff' + log[at:], ''))
    readable(res)


# ---- what a freshly provisioned lab node answers: every check ok, no warn --------------------------

PROFILES = yaml.safe_load(open(os.path.join(ROOT, 'playbooks', 'vars', 'hardware_profiles.yml')))['hardware_profiles']
# -q of each lab node (lab/simulator/derive.py): the H100 node answers from its 8-GPU capture.
LAB_Q = {'hgx-h100-8gpu': 'gpud/nvidia-smi-query.535.161.08.out.0.valid',
         'hgx-a100-8gpu': 'derived/hgx-a100-8gpu/q.txt', 'pcie-l40s-4gpu': 'derived/pcie-l40s-4gpu/q.txt'}


def provisioned(text):
    """gpu_power enables persistence mode on every GPU (the simulator records it the same way)."""
    return text.replace(', Disabled, ', ', Enabled, ')


@pytest.mark.parametrize('profile', sorted(LAB_Q))
def test_a_provisioned_lab_node_is_ok_on_every_check(profile):
    p = PROFILES[profile]
    expected = gpu_health_expected(PROFILES, profile)  # what node_verify and the health timer pass
    res, failed, runner = run_module(gpu_health.main, {'expected': expected}, {
        (lambda a: len(a) > 1 and a[1].startswith('--query-gpu=')):
            (0, provisioned(health_query('derived/%s/query_gpu.csv' % profile)), ''),
        ('-q',): (0, fixture(LAB_Q[profile]), ''),
        (lambda a: a == ['/usr/bin/dmesg']): (0, '', ''),
        ('is-active', 'nvidia-fabricmanager'): (0, 'active\n', ''),
    }, bins={'nvidia-smi': '/usr/bin/nvidia-smi', 'dmesg': '/usr/bin/dmesg', 'systemctl': '/usr/bin/systemctl'})
    assert not failed, res['msg']
    assert res['summary']['verdict'] == 'ok' and res['summary']['warn'] == 0, res['summary']
    assert (['/usr/bin/systemctl', 'is-active', 'nvidia-fabricmanager'] in runner.calls) == p['nvswitch']


def test_fabric_manager_stopped_on_a_pre_hopper_node_is_named():
    res, failed, _ = run_module(gpu_health.main, {'expected': {'gpu_count': 8, 'nvswitch': True}}, {
        (lambda a: len(a) > 1 and a[1].startswith('--query-gpu=')):
            (0, provisioned(health_query('derived/hgx-a100-8gpu/query_gpu.csv')), ''),
        ('-q',): (0, fixture(LAB_Q['hgx-a100-8gpu']), ''),
        (lambda a: a == ['/usr/bin/dmesg']): (0, '', ''),
        ('is-active', 'nvidia-fabricmanager'): (3, 'inactive\n', ''),
    }, bins={'nvidia-smi': '/usr/bin/nvidia-smi', 'dmesg': '/usr/bin/dmesg', 'systemctl': '/usr/bin/systemctl'})
    assert failed
    assert res['gpus'][0]['checks']['fabric']['message'] == (
        'GPU reports no fabric registration (pre-Hopper) and nvidia-fabricmanager is inactive')


# ---- every text-reading check module: mutated outputs always give a result ansible-core can read ----------

def _topology(text):
    return run_module(nvlink_topology.main, {'expected': {'gpu_count': 8, 'link_code': 'NV18'}},
                      {('topo', '-m'): (0, text, '')})


def _dcgm(text):
    return run_module(dcgm_diag.main, {}, {('diag', '-r', '1', '-j'): (0, text, '')}, bins={'dcgmi': '/usr/bin/dcgmi'})


def _nccl(text):
    return run_module(nccl_bandwidth.main, {'gpus': 4, 'min_busbw_gbps': 400},
                      {(lambda a: a[0].endswith('all_reduce_perf')): (0, text, '')},
                      bins={'all_reduce_perf': '/usr/bin/all_reduce_perf'})


MODULE_CASES = {
    'nvlink_topology': (_topology, fixture(H100 + 'topo.txt')),
    'dcgm_diag': (_dcgm, fixture('derived/dcgmi/diag_r1_pass.json')),
    'nccl_bandwidth': (_nccl, fixture('nccl_allreduce_4xGB300_singlenode_newformat_truncated_oci.txt')),
}


def _module_case(name):
    call, text = MODULE_CASES[name]

    @SETTINGS
    @given(mutation=mutations(text))
    def test(mutation):
        kind, description, mutated = mutation
        res, failed, _ = call(mutated)
        readable(res)
        assert not failed or res.get('msg'), description
    return test


for _name in MODULE_CASES:
    globals()['test_%s_mutations_give_a_readable_result' % _name] = _module_case(_name)


@pytest.mark.parametrize('name', sorted(MODULE_CASES))
def test_module_cases_pass_on_the_recording(name):
    call, text = MODULE_CASES[name]
    res, failed, _ = call(text)
    assert not failed, res.get('msg')
