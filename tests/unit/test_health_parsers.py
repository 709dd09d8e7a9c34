# -*- coding: utf-8 -*-
"""Tests of the --query-gpu, -q, NVML and Xid readers and the health check grading."""

import pytest
from ansible.module_utils.gpu_nvml import gather_nvml
from ansible.module_utils.gpu_parsers import (HEALTH_QUERY_FIELDS, ParseError, normalize_bus_id,
                                              normalize_query_row, parse_health_query, parse_nvsmi_q,
                                              parse_nvsmi_q_tree, parse_query_csv, parse_settings_query,
                                              parse_xid_log, to_bool, to_number)
from ansible.module_utils.health_checks import evaluate_health, merge_records, render_prometheus

from fake_nvml import make_fake_pynvml
from helpers import capture_section, fixture

# -q fixtures: name, gpu count, product name, driver, {field: value of GPU0}
Q_CASES = [
    ('gpud/nvidia-smi-query.535.161.08.out.0.valid', 8, 'NVIDIA H100 80GB HBM3', '535.161.08',
     {'bus_id': '0000:19:00.0', 'slowdown_temp_c': 87, 'power_limit_w': 700.0, 'fabric_state': 'Completed',
      'throttle_hw_slowdown': True, 'ecc_uncorrected_volatile': 0, 'pcie_gen_max': 5, 'pcie_width_max': 16,
      'remapped_rows_pending': False, 'persistence_mode': True}),
    ('gpud/nvidia-smi-query.535.183.01.out.0.valid', 8, 'NVIDIA H100 80GB HBM3', '535.183.01',
     {'fabric_status': 'Success', 'throttle_hw_slowdown': False}),
    ('gpud/nvidia-smi-query.535.129.03.out.0.valid.a10', 1, 'NVIDIA A10', '535.129.03',
     {'remapped_rows_pending': True, 'remapped_rows_uncorrectable': 4, 'slowdown_temp_c': 98,
      'retired_pages_pending': None}),
    ('gpud/nvidia-smi-query.535.154.05.out.0.valid', 8, 'NVIDIA GeForce RTX 4090', '535.154.05',
     {'power_limit_w': 450.0, 'ecc_uncorrected_volatile': None, 'slowdown_temp_c': 85}),
    ('gpud/nvidia-smi-query.535.154.05.out.0.valid.4090', 8, 'NVIDIA GeForce RTX 4090', '535.154.05', {}),
    ('gpud/nvidia-smi-query.535.154.05.out.1.valid', 8, 'NVIDIA GeForce RTX 4090', '535.154.05', {}),
    ('gpud/nvidia-smi-query.535.154.05.out.2.valid', 8, 'NVIDIA GeForce RTX 4090', '535.154.05', {}),
    ('gpud/nvidia-smi-query.535.154.05.out.3.valid', 8, 'NVIDIA GeForce RTX 4090', '535.154.05', {}),
    ('gpud/nvidia-smi-query.560.35.03.out.0.valid', 1, 'NVIDIA TITAN V', '560.35.03',
     {'slowdown_temp_c': 97, 'shutdown_temp_c': 100, 'remapped_rows_pending': None, 'pcie_gen_max': 3}),
    ('nvsmi_q_page_retirement_8gpu_aznhc.txt', 8, None, '535.86.10',
     {'retired_pages_pending': False, 'retired_pages_dbe': 0, 'bus_id': '0001:00:00.0'}),
    ('nvsmi_q_page_retirement_8gpu_bad_aznhc.txt', 8, None, '535.86.10',
     {'retired_pages_pending': False, 'retired_pages_dbe': 5}),
]


@pytest.mark.parametrize('name,count,product,driver,values', Q_CASES, ids=[c[0] for c in Q_CASES])
def test_nvsmi_q_fixture(name, count, product, driver, values):
    recs = parse_nvsmi_q(fixture(name))
    assert len(recs) == count
    assert [r['index'] for r in recs] == list(range(count))
    assert recs[0]['name'] == product
    assert all(r['driver_version'] == driver for r in recs)
    for k, v in values.items():
        assert recs[0][k] == v, k


def test_page_retirement_bad_per_gpu():
    recs = parse_nvsmi_q(fixture('nvsmi_q_page_retirement_8gpu_bad_aznhc.txt'))
    assert [r['retired_pages_dbe'] for r in recs] == [5, 61, 0, 0, 0, 45, 0, 56]
    assert [r['retired_pages_pending'] for r in recs].count(True) == 4
    assert recs[1]['retired_pages_pending'] is True


def test_invalid_q_fixture_is_clean_error():
    with pytest.raises(ParseError, match='Attached GPUs" says 8 but 1 GPU sections'):
        parse_nvsmi_q(fixture('gpud/nvidia-smi-query.535.183.01.out.0.invalid'))


def test_q_missing_clock_reason_keys_is_named():
    text = fixture('gpud/nvidia-smi-query.535.183.01.out.0.invalid').replace(
        'Attached GPUs                             : 8', 'Attached GPUs                             : 1')
    with pytest.raises(ParseError, match='GPU 0: "Clocks Event Reasons" lacks HW Slowdown'):
        parse_nvsmi_q(text)


@pytest.mark.parametrize('text,match', [
    ('', 'NVSMI LOG'),
    ('==============NVSMI LOG==============\nGPU 00000000:19:00.0\nstray\n', 'unexpected unindented'),
    ('==============NVSMI LOG==============\nAttached GPUs : x\n', 'not a number'),
    ('==============NVSMI LOG==============\n    indented before gpu\n', 'before the first GPU'),
])
def test_q_malformed(text, match):
    with pytest.raises(ParseError, match=match):
        parse_nvsmi_q(text)


def test_q_tree_nesting():
    tree = parse_nvsmi_q_tree(fixture('gpud/nvidia-smi-query.535.161.08.out.0.valid'))
    g = tree['gpus'][0]
    assert g['PCI']['GPU Link Info']['Link Width']['Max'] == '16x'
    assert g['Clocks Event Reasons']['HW Thermal Slowdown'] == 'Not Active'


CAPTURES = ['linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt', 'linux-x86_64__nvidia-h200__590.48.01.txt',
            'linux-x86_64__nvidia-l40s__595.80.txt', 'linux-x86_64__nvidia-h100-mig__590.48.01.txt',
            'linux-x86_64__nvidia-h200-mig__590.48.01.txt',
            'linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05.txt',
            'linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt',
            'linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt',
            'windows-x86_64__nvidia-geforce-rtx-2080-super__591.86.txt',
            'windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt']
# Values that change between the two nvidia-smi runs of a capture (idle machine, seconds apart).
DYNAMIC = ('temperature_c', 'power_draw_w')


def _capture_records(name):
    q = parse_nvsmi_q(capture_section(name, 'nvidia-smi -q'))
    rows = parse_query_csv(capture_section(name, 'nvidia-smi --query-gpu=timestamp'))
    return q, [normalize_query_row(r) for r in rows]


@pytest.mark.parametrize('name', CAPTURES)
def test_query_gpu_and_q_agree(name):
    q, csv = _capture_records(name)
    assert len(q) == len(csv) == 1
    for key, value in csv[0].items():
        if key in DYNAMIC:
            continue
        assert q[0][key] == value, key
    assert csv[0]['bus_id'] == q[0]['bus_id']
    assert q[0]['slowdown_temp_c'] is not None


def test_h200_capture_values():
    q, csv = _capture_records('linux-x86_64__nvidia-h200__590.48.01.txt')
    r = csv[0]
    assert r['name'] == 'NVIDIA H200' and r['bus_id'] == '0000:83:00.0' and r['power_limit_w'] == 700.0
    assert r['fabric_state'] == 'Completed' and r['fabric_status'] == 'Success'
    assert r['retired_pages_pending'] is None  # "[N/A]"
    assert r['throttle_hw_slowdown'] is False  # "Not Active"
    assert q[0]['slowdown_temp_c'] == 28 + 59 + 2  # T.Limit relative thresholds


def test_health_query_noheader_nounits():
    text = ('0, NVIDIA H100 80GB HBM3, GPU-1, 00000000:19:00.0, 535.183.01, Enabled, 0, 0, [N/A], [N/A], No, No, 0,'
            ' 5, 5, 16, 16, 33, 71.50, 700.00, Not Active, Not Active, Not Active, Not Active, Completed, Success\n')
    (r,) = parse_health_query(text)
    assert r['index'] == 0 and r['persistence_mode'] is True and r['power_limit_w'] == 700.0
    assert r['retired_pages_dbe'] is None and r['remapped_rows_failure'] is False
    with pytest.raises(ParseError, match='row 1: expected 26 fields, found 5'):
        parse_health_query('0, a, b, c, d\n')
    with pytest.raises(ParseError, match=r"GPU 0 temperature.gpu: not a number: 'hot'"):
        parse_health_query(text.replace(', 33,', ', hot,'))
    with pytest.raises(ParseError, match="GPU 0 persistence_mode: not a boolean state: 'Maybe'"):
        parse_health_query(text.replace('Enabled', 'Maybe'))
    assert len(HEALTH_QUERY_FIELDS) == 26


def test_query_csv_with_header_fixtures():
    rows = parse_query_csv(fixture('query_gpu_csv_h200_pcie_gen_width_distributedai.txt'))
    assert len(rows) == 8
    assert rows[0]['name'] == 'NVIDIA H200' and rows[0]['pcie.link.gen.max'] == '5'
    assert to_number(rows[0]['memory.total'], 'mem') == 143771
    assert rows[0]['pcie.link.width.max'] == '16'


def test_query_csv_elided_fixture():
    text = fixture('query_gpu_csv_name_busid_vbios_h100_elided_mlengineering.txt')
    lines = [line for line in text.splitlines() if '...' not in line and line.strip()]
    rows = parse_query_csv('\n'.join(lines))
    assert rows[0]['name'] if 'name' in rows[0] else rows[0]['gpu_name']


@pytest.mark.parametrize('value,num,flag', [
    ('700.00', 700.0, None), ('700.00 W', 700.0, None), ('16x', 16, None), ('[N/A]', None, None),
    ('N/A', None, None), ('[Not Supported]', None, None), ('Enabled', None, True), ('Disabled', None, False),
    ('Active', None, True), ('Not Active', None, False), ('Yes', None, True), ('No', None, False),
])
def test_value_conversions(value, num, flag):
    if flag is None:
        assert to_number(value, 'x') == num
    else:
        assert to_bool(value, 'x') is flag


def test_settings_query():
    text = '0, Enabled, 700.00, 200.00, 700.00, 2619, 1980\n1, Disabled, 650.00, 200.00, 700.00, [N/A], [N/A]\n'
    a, b = parse_settings_query(text)
    assert a == {'index': 0, 'persistence_mode': True, 'power_limit_w': 700.0, 'power_min_w': 200.0,
                 'power_max_w': 700.0, 'app_clock_memory_mhz': 2619, 'app_clock_graphics_mhz': 1980}
    assert b['persistence_mode'] is False and b['app_clock_memory_mhz'] is None


@pytest.mark.parametrize('raw,norm', [('00000000:9B:00.0', '0000:9b:00.0'), ('0000:9b:00', '0000:9b:00.0'),
                                      ('00000001:00:00.0', '0001:00:00.0')])
def test_bus_id(raw, norm):
    assert normalize_bus_id(raw) == norm


def test_xid_fixture():
    ev = parse_xid_log(fixture('gpud/dmesg-with-xid-119.log'))
    assert ev and all(e['xid'] == 119 and e['bus_id'] == '0000:9b:00.0' for e in ev)
    assert all(e['severity'] == 'fail' for e in ev)
    assert 'GSP' in ev[0]['message']


def test_xid_warn_and_malformed():
    ev = parse_xid_log('[1.0] NVRM: Xid (PCI:0000:19:00): 13, pid=1, Graphics Exception\n')
    assert ev[0]['severity'] == 'warn' and ev[0]['xid'] == 13
    with pytest.raises(ParseError, match='kernel log line 1: cannot parse Xid line'):
        parse_xid_log('NVRM: Xid (PCI:zz): oops\n')
    assert parse_xid_log('') == []


# ---- NVML path -------------------------------------------------------------

@pytest.mark.parametrize('name', ['linux-x86_64__nvidia-h200__590.48.01.txt',
                                  'linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt',
                                  'linux-x86_64__nvidia-l40s__595.80.txt'])
def test_nvml_path_equals_nvidia_smi_path(name):
    q, csv = _capture_records(name)
    smi = merge_records(csv, q)
    fake = make_fake_pynvml(smi)
    nvml = gather_nvml(fake)
    assert nvml == smi
    assert fake.shutdown_called


def test_nvml_path_8gpu_and_graded_equal():
    q = parse_nvsmi_q(fixture('gpud/nvidia-smi-query.535.161.08.out.0.valid'))
    nvml = gather_nvml(make_fake_pynvml(q))
    assert nvml == q
    exp = {'gpu_count': 8, 'nvswitch': True}
    assert evaluate_health(nvml, exp, []) == evaluate_health(q, exp, [])


# ---- grading ---------------------------------------------------------------

def _h100_records():
    return parse_nvsmi_q(fixture('gpud/nvidia-smi-query.535.183.01.out.0.valid'))


def test_grading_healthy_h100():
    gpus, node, summary = evaluate_health(_h100_records(), {'gpu_count': 8, 'driver_version': '535',
                                                            'nvswitch': True, 'pcie': {'gen': 5, 'width': 16},
                                                            'power_limit_watts': 700}, [])
    # the recorded node really had HW Slowdown active on its third GPU
    assert summary['failed_checks'] == ['GPU2 throttle']
    assert node['count']['severity'] == 'ok' and node['fabric']['severity'] == 'ok'
    assert set(gpus[0]['checks']) == {'driver_version', 'persistence_mode', 'ecc', 'retired_pages', 'row_remap',
                                      'xid', 'pcie', 'temperature', 'throttle', 'power', 'fabric'}


@pytest.mark.parametrize('change,check,severity,msg', [
    ({'ecc_uncorrected_volatile': 2}, 'ecc', 'fail', 'volatile uncorrectable'),
    ({'ecc_uncorrected_aggregate': 3}, 'ecc', 'warn', 'aggregate'),
    ({'retired_pages_pending': True}, 'retired_pages', 'fail', 'pending'),
    ({'retired_pages_dbe': 61}, 'retired_pages', 'fail', 'limit 60'),
    ({'retired_pages_dbe': 5}, 'retired_pages', 'warn', '5 double-bit'),
    ({'remapped_rows_pending': True}, 'row_remap', 'fail', 'reset needed'),
    ({'remapped_rows_failure': True}, 'row_remap', 'fail', 'failure'),
    ({'pcie_width_current': 8}, 'pcie', 'fail', 'width x8'),
    ({'pcie_gen_current': 1}, 'pcie', 'warn', 'gen 1 below gen 5'),
    ({'pcie_gen_max': 4, 'pcie_gen_current': 4}, 'pcie', 'fail', 'max gen 4'),
    ({'pcie_gen_max': 4}, 'pcie', 'fail', 'above its maximum: gen 5 of 4'),
    ({'temperature_c': 84}, 'temperature', 'warn', 'alert'),
    ({'temperature_c': 99}, 'temperature', 'fail', 'slowdown'),
    ({'throttle_hw_slowdown': True}, 'throttle', 'fail', 'hw_slowdown'),
    ({'throttle_hw_power_brake': True}, 'throttle', 'fail', 'hw_power_brake_slowdown'),
    ({'throttle_sw_thermal': True}, 'throttle', 'warn', 'software thermal'),
    ({'power_limit_w': 650.0}, 'power', 'warn', 'drifted'),
    ({'fabric_state': 'In Progress'}, 'fabric', 'fail', 'In Progress'),
    ({'fabric_state': None, 'fabric_status': None}, 'fabric', 'fail', 'nvidia-fabricmanager is not checked'),
    ({'persistence_mode': False}, 'persistence_mode', 'warn', 'disabled'),
    ({'driver_version': '550.54.15'}, 'driver_version', 'fail', 'expected 535'),
])
def test_grading_faults(change, check, severity, msg):
    recs = _h100_records()
    recs[3].update(change)
    gpus, node, summary = evaluate_health(recs, {'gpu_count': 8, 'driver_version': '535', 'nvswitch': True,
                                                 'pcie': {'gen': 5, 'width': 16}, 'power_limit_watts': 700}, [])
    c = gpus[3]['checks'][check]
    assert c['severity'] == severity and msg in c['message']
    label = 'GPU3 %s' % check
    assert (label in summary['failed_checks']) == (severity == 'fail')
    assert summary['verdict'] in ('warn', 'fail')


def test_missing_gpu_and_xid_mapping():
    recs = _h100_records()[:7]
    xid = [{'bus_id': recs[2]['bus_id'], 'xid': 79, 'severity': 'fail', 'message': 'fell off the bus', 'line': 1},
           {'bus_id': '0000:ff:00.0', 'xid': 13, 'severity': 'warn', 'message': 'x', 'line': 2}]
    gpus, node, summary = evaluate_health(recs, {'gpu_count': 8}, xid)
    assert node['count']['severity'] == 'fail' and 'found 7 GPUs, expected 8' in node['count']['message']
    assert gpus[2]['checks']['xid']['severity'] == 'fail' and gpus[2]['checks']['xid']['value'] == [79]
    assert node['xid']['severity'] == 'warn'
    assert 'node count' in summary['failed_checks'] and 'GPU2 xid' in summary['failed_checks']


def test_unreadable_kernel_log_fails_with_the_reason():
    gpus, node, summary = evaluate_health(_h100_records(), {}, None, kernel_log_error='dmesg failed (rc=1: EPERM)')
    assert gpus[0]['checks']['xid'] == {'severity': 'fail', 'value': None,
                                        'message': 'Xid not checked: dmesg failed (rc=1: EPERM)'}
    assert 'GPU0 xid' in summary['failed_checks']


def test_prometheus_render():
    recs = _h100_records()
    recs[1]['ecc_uncorrected_volatile'] = 1
    gpus, node, summary = evaluate_health(recs, {}, [])
    text = render_prometheus(gpus, node, summary)
    assert 'gpu_health_check_status{gpu="1",check="ecc",severity="fail"} 1' in text
    assert 'gpu_health_check_status{gpu="0",check="ecc",severity="ok"} 1' in text
    assert 'gpu_health_ok 0' in text
    assert text.endswith('\n')
