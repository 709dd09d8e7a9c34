# -*- coding: utf-8 -*-
"""Module tests: run_command/get_bin_path mocked at the boundary, argv and results asserted."""

import os

import pytest

import gpu_health
import gpu_settings
import nvlink_topology
import rdma_health
from helpers import capture_section, fixture, run_module

SMI = '/usr/bin/nvidia-smi'
H200_TOPO = fixture('topo_h200_8gpu_12nic_nv18_distributedai.txt')
NVLINK_8 = fixture('gpud/nvidia-smi.nvlink.status.a100')


# ---- nvlink_topology -------------------------------------------------------

def test_topology_reads_and_returns():
    res, failed, r = run_module(nvlink_topology.main, {}, {('topo', '-m'): (0, H200_TOPO, '')})
    assert not failed and res['changed'] is False
    assert r.calls == [[SMI, 'topo', '-m']]
    t = res['topology']
    assert t['gpu_count'] == 8 and t['links']['GPU0']['GPU1'] == 'NV18' and t['links']['GPU0']['mlx5_0'] == 'PXB'


def test_topology_expected_ok_with_status_and_errors():
    res, failed, r = run_module(nvlink_topology.main, {
        'nvlink_status': True,
        'expected': {'gpu_count': 8, 'link_code': 'NV18', 'nic_max_distance': 'PXB', 'nic_count': 12,
                     'max_nvlink_errors': 0}}, {
        ('topo', '-m'): (0, H200_TOPO, ''),
        ('nvlink', '-s'): (0, NVLINK_8, ''),
        ('nvlink', '-e'): (0, fixture('nvlink_e_h100_gpu0_elided_mlengineering.txt'), ''),
    }, check_mode=True)
    assert not failed, res.get('msg')
    assert r.calls == [[SMI, 'topo', '-m'], [SMI, 'nvlink', '-s'], [SMI, 'nvlink', '-e']]
    assert res['topology']['nvlink']['GPU0']['links'][0]['state'] == 'active'
    assert res['topology']['nvlink_errors']['GPU0']['links']['17']['crc_errors'] == 0


def test_topology_mismatches():
    topo = H200_TOPO.replace('GPU2\tNV18\tNV18\t X \tNV18\tNV18\tNV18', 'GPU2\tNV18\tNV18\t X \tNV18\tNV18\tNV12')
    res, failed, _ = run_module(nvlink_topology.main, {
        'expected': {'gpu_count': 8, 'link_code': 'NV18', 'nic_max_distance': 'PIX', 'nvlinks_active': True}}, {
        ('topo', '-m'): (0, topo, ''),
        ('nvlink', '-s'): (0, fixture('nvlink_s_3xRTXA6000_one_gpu_inactive_siboehm.txt'), ''),
    })
    assert failed
    items = [(m['item'], m['check']) for m in res['mismatches']]
    assert ('GPU2-GPU5', 'link_code') in items
    assert ('GPU1 nic', 'nic_max_distance') in items
    assert ('GPU2 nvlink', 'nvlinks_active') in items  # "all links are inActive"
    assert ('GPU3 nvlink', 'nvlinks_active') in items  # not reported
    assert 'GPU2-GPU5 link expected NV18 found NV12' in res['msg']
    assert res['msg'].startswith('%d topology mismatches: ' % len(res['mismatches']))
    assert res['topology']['gpu_count'] == 8
    # one result format: a fail per mismatch, an ok per expectation that held
    assert res['verdict'] == 'fail'
    assert ('link_code', 'GPU2-GPU5', 'fail', 'NV12', 'NV18') in [
        (c['name'], c['subject'], c['status'], c['measured'], c['expected']) for c in res['checks']]
    assert ('gpu_count', 'node', 'ok') in [(c['name'], c['subject'], c['status']) for c in res['checks']]


def test_topology_asymmetric_matrix_fails_naming_both_ends():
    """One link seen differently from its two ends (GPU5's row says NV12 to GPU2, GPU2's row NV18)."""
    lines = H200_TOPO.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith('GPU5\t'))
    cells = lines[i].split('\t')
    cells[3] = 'NV12'
    lines[i] = '\t'.join(cells)
    res, failed, _ = run_module(nvlink_topology.main, {}, {('topo', '-m'): (0, '\n'.join(lines) + '\n', '')})
    assert failed and res['verdict'] == 'fail'
    sym = [c for c in res['checks'] if c['name'] == 'symmetry']
    assert [(c['subject'], c['status']) for c in sym] == [('GPU2-GPU5', 'fail')]
    assert 'nvidia-smi topo -m GPU2->GPU5 NV18 but GPU5->GPU2 NV12' in sym[0]['reason']
    res, failed, _ = run_module(nvlink_topology.main, {}, {('topo', '-m'): (0, H200_TOPO, '')})
    assert not failed and res['verdict'] == 'ok'
    assert [(c['name'], c['subject'], c['status']) for c in res['checks']] == [('symmetry', 'node', 'ok')]


def test_topology_min_nvlinks_and_error_thresholds():
    nv_e = 'GPU 0: H100 (UUID: U)\n\t Link 4: Replay Errors: 3\n\t Link 4: CRC Errors: 9\n'
    res, failed, _ = run_module(nvlink_topology.main, {
        'expected': {'min_nvlinks': 12, 'max_nvlink_errors': {'crc_errors': 5}}}, {
        ('topo', '-m'): (0, fixture('topo_dgx1v_8gpu_hybridcube_nv1nv2_mlx5cols_oldlegend_msccl.txt'), ''),
        ('nvlink', '-e'): (0, nv_e, '')})
    assert failed
    mm = res['mismatches']
    assert {'item': 'GPU0-GPU1', 'check': 'min_nvlinks', 'expected': 'NV12 or more', 'found': 'NV1'} in mm
    assert {'item': 'GPU0 link 4', 'check': 'max_nvlink_errors.crc_errors', 'expected': '<= 5', 'found': 9} in mm
    assert not any(m['check'] == 'max_nvlink_errors.replay_errors' for m in mm)


def test_topology_inactive_link_named():
    nv_s = 'GPU 0: X (UUID: U)\n\t Link 0: 25 GB/s\n\t Link 4: <inactive>\n'
    topo = '\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\n'
    res, failed, _ = run_module(nvlink_topology.main, {'expected': {'nvlinks_active': True}}, {
        ('topo', '-m'): (0, topo, ''), ('nvlink', '-s'): (0, nv_s, '')})
    assert failed and res['mismatches'] == [{'item': 'GPU0 link 4', 'check': 'nvlinks_active',
                                             'expected': 'active', 'found': 'inactive'}]
    assert res['msg'].startswith('1 topology mismatch: ')


@pytest.mark.parametrize('out,rc,match', [
    ('\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\n', 0, 'row GPU1 .*expected 2 link fields'),
    ('', 9, 'topo -m failed .rc=9.'),
    ('garbage', 0, 'cannot parse nvidia-smi output'),
])
def test_topology_malformed_is_clean_failure(out, rc, match):
    res, failed, _ = run_module(nvlink_topology.main, {}, {('topo', '-m'): (rc, out, 'NVML error')})
    assert failed
    import re
    assert re.search(match, res['msg'])


def test_topology_missing_binary():
    res, failed, _ = run_module(nvlink_topology.main, {}, {}, bins={})
    assert failed and 'nvidia-smi' in res['msg']


# ---- gpu_health ------------------------------------------------------------

H200_CAP = 'linux-x86_64__nvidia-h200__590.48.01.txt'


def _h200_query_noheader():
    """Build the module's own --query-gpu answer from the capture's full CSV (same machine)."""
    from ansible.module_utils.gpu_parsers import HEALTH_QUERY_FIELDS, parse_query_csv
    row = parse_query_csv(capture_section(H200_CAP, 'nvidia-smi --query-gpu=timestamp'))[0]
    vals = []
    for f in HEALTH_QUERY_FIELDS:
        v = row[f]
        for unit in (' W', ' MHz', ' %', ' C'):
            if v.endswith(unit):
                v = v[:-len(unit)]
        vals.append(v)
    return ', '.join(vals) + '\n'


def _health_responses(q=None, query=None, dmesg=(0, '', '')):
    return {
        (lambda a: len(a) > 1 and a[1].startswith('--query-gpu=')): (0, query or _h200_query_noheader(), ''),
        ('-q',): (0, q or capture_section(H200_CAP, 'nvidia-smi -q'), ''),
        (lambda a: a == ['/usr/bin/dmesg']): dmesg,
    }


@pytest.fixture(autouse=True)
def no_pynvml(monkeypatch):
    monkeypatch.setattr(gpu_health, '_import_pynvml', lambda: None)


def test_gpu_health_ok_h200(tmp_path):
    res, failed, r = run_module(gpu_health.main, {
        'expected': {'gpu_count': 1, 'driver_version': '590', 'nvswitch': True, 'pcie': {'gen': 5, 'width': 16},
                     'power_limit_watts': 700},
        'textfile_dir': str(tmp_path)}, _health_responses())
    assert not failed, res.get('msg')
    from ansible.module_utils.gpu_parsers import HEALTH_QUERY_FIELDS
    assert r.calls[0] == [SMI, '--query-gpu=' + ','.join(HEALTH_QUERY_FIELDS), '--format=csv,noheader,nounits']
    assert r.calls[1] == [SMI, '-q'] and r.calls[2] == ['/usr/bin/dmesg']
    g = res['gpus'][0]
    assert g['bus_id'] == '0000:83:00.0' and g['name'] == 'NVIDIA H200'
    assert g['checks']['temperature']['value']['slowdown'] == 89
    assert res['summary']['verdict'] == 'ok' and res['summary']['fail'] == 0
    assert res['changed'] is False and res['source'] == 'nvidia-smi'
    prom = (tmp_path / 'gpu_health.prom').read_text()
    assert 'gpu_health_ok 1' in prom
    assert '\ngpu_health_gpus 1\n' in prom  # the GPU count the KPI rules fall back on without dcgm-exporter
    assert [p for p in os.listdir(tmp_path) if p != 'gpu_health.prom'] == []  # temp file renamed away


def test_a_registered_gpu_check_reaches_the_module_the_timer_metrics_and_the_report(tmp_path, monkeypatch):
    """Adding a health check is one function: register it, and the module's checks, the Prometheus textfile
    and the readiness report carry it with no other edit."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'filter_plugins'))
    import readiness
    from ansible.module_utils import health_checks
    monkeypatch.setattr(health_checks, 'GPU_CHECKS', list(health_checks.GPU_CHECKS))

    @health_checks.gpu_check('vbios_known')
    def _vbios(rec, expected, ctx):
        return {'severity': 'warn', 'message': 'VBIOS not in the site list', 'value': rec.get('index')}

    res, failed, _ = run_module(gpu_health.main, {'textfile_dir': str(tmp_path)}, _health_responses())
    assert not failed and res['verdict'] == 'warn'
    assert ('vbios_known', 'GPU0', 'warn', 'VBIOS not in the site list') in [
        (c['name'], c['subject'], c['status'], c['reason']) for c in res['checks']]
    prom = (tmp_path / 'gpu_health.prom').read_text()
    assert 'gpu_health_check_status{gpu="0",check="vbios_known",severity="warn"} 1' in prom
    row = readiness.readiness_row({'gpu': res, 'topology': {'checks': res['checks'][:1]},
                                   'rdma': {'checks': res['checks'][:1]}}, 'gpu-a1')
    assert row['columns']['gpus']['status'] == 'warn'
    assert 'GPU0 vbios_known: VBIOS not in the site list' in row['columns']['gpus']['reasons']


def test_gpu_health_check_mode_writes_nothing(tmp_path):
    res, failed, _ = run_module(gpu_health.main, {'textfile_dir': str(tmp_path)}, _health_responses(),
                                check_mode=True)
    assert not failed and os.listdir(tmp_path) == []
    assert res['textfile'] == str(tmp_path / 'gpu_health.prom')


def test_gpu_health_xid_and_missing_gpu_fail(tmp_path):
    log = tmp_path / 'kern.log'
    log.write_text('[1.0] NVRM: Xid (PCI:0000:83:00): 79, pid=1, GPU has fallen off the bus.\n')
    res, failed, r = run_module(gpu_health.main, {'expected': {'gpu_count': 8}, 'kernel_log_path': str(log)},
                                _health_responses())
    assert failed
    assert 'node count' in res['summary']['failed_checks'] and 'GPU0 xid' in res['summary']['failed_checks']
    assert 'found 1 GPUs, expected 8' in res['msg'] and 'GPU0 xid' in res['msg']
    assert ['/usr/bin/dmesg'] not in r.calls
    assert res['gpus'][0]['checks']['xid']['value'] == [79]


def test_gpu_health_dmesg_not_permitted_fails_closed():
    res, failed, _ = run_module(gpu_health.main, {}, _health_responses(
        dmesg=(1, '', 'dmesg: read kernel buffer failed: Operation not permitted')))
    assert failed and res['xid_events'] is None
    assert res['gpus'][0]['checks']['xid']['severity'] == 'fail'
    assert ('GPU0 xid (fail: Xid not checked: dmesg failed (rc=1: dmesg: read kernel buffer failed: '
            'Operation not permitted))') in res['msg']


def test_gpu_health_dmesg_xid_fixture_on_h100_8gpu():
    q = fixture('gpud/nvidia-smi-query.535.183.01.out.0.valid')
    from ansible.module_utils.gpu_parsers import parse_nvsmi_q
    recs = parse_nvsmi_q(q)
    lines = []
    for rec in recs:
        lines.append('%d, %s, %s, %s, 535.183.01, Enabled, 0, 0, [N/A], [N/A], No, No, 0, 5, 5, 16, 16, 30, 70.0, '
                     '700.00, Not Active, Not Active, Not Active, Not Active, Completed, Success'
                     % (rec['index'], rec['name'], rec['uuid'], rec['bus_id'].upper()))
    xid = fixture('gpud/dmesg-with-xid-119.log')
    res, failed, _ = run_module(gpu_health.main, {'expected': {'gpu_count': 8}},
                                _health_responses(q=q, query='\n'.join(lines) + '\n', dmesg=(0, xid, '')))
    bus = dict((g['bus_id'], g) for g in res['gpus'])
    if '0000:9b:00.0' in bus:
        assert failed and bus['0000:9b:00.0']['checks']['xid']['severity'] == 'fail'
    else:
        assert res['node']['xid']['severity'] == 'warn'


def test_gpu_health_invalid_q_is_clean_failure():
    res, failed, _ = run_module(gpu_health.main, {}, _health_responses(
        q=fixture('gpud/nvidia-smi-query.535.183.01.out.0.invalid')))
    assert failed and res['msg'].startswith('cannot parse nvidia-smi -q output: ')
    assert 'Attached GPUs' in res['msg']


def test_gpu_health_truncated_query_is_clean_failure():
    res, failed, _ = run_module(gpu_health.main, {}, _health_responses(query='0, NVIDIA H200, GPU-0\n'))
    assert failed and 'expected 26 fields, found 3' in res['msg']


def test_gpu_health_nvml_path(monkeypatch):
    from fake_nvml import make_fake_pynvml
    from ansible.module_utils.gpu_parsers import parse_nvsmi_q
    recs = parse_nvsmi_q(fixture('gpud/nvidia-smi-query.535.183.01.out.0.valid'))
    monkeypatch.setattr(gpu_health, '_import_pynvml', lambda: make_fake_pynvml(recs))
    res, failed, r = run_module(gpu_health.main, {'expected': {'gpu_count': 8, 'nvswitch': True}},
                                {(lambda a: a == ['/usr/bin/dmesg']): (0, '', '')})
    # the recorded node had HW power brake active on GPU2; the NVML path sees it too
    assert failed and res['summary']['failed_checks'] == ['GPU2 throttle']
    assert res['source'] == 'nvml' and r.calls == [['/usr/bin/dmesg']]
    assert len(res['gpus']) == 8


@pytest.mark.parametrize('expected', [
    {'gpu_count': 1, 'driver_version': '590', 'nvswitch': True, 'pcie': {'gen': 5, 'width': 16},
     'power_limit_watts': 700},
    # a plan the recorded node does not meet: the same failed checks either way
    {'gpu_count': 8, 'driver_version': '570', 'nvswitch': True, 'pcie': {'gen': 5, 'width': 16},
     'power_limit_watts': 600},
])
def test_gpu_health_same_checks_and_verdict_through_nvml_and_nvidia_smi(monkeypatch, expected):
    """The same recorded node read through nvidia-smi and through NVML (the recorded values behind a fake
    pynvml) gives the same checks and the same verdict."""
    from fake_nvml import make_fake_pynvml
    from ansible.module_utils.gpu_parsers import normalize_query_row, parse_nvsmi_q, parse_query_csv
    from ansible.module_utils.health_checks import merge_records
    smi_res, smi_failed, _ = run_module(gpu_health.main, {'expected': expected}, _health_responses())
    q = parse_nvsmi_q(capture_section(H200_CAP, 'nvidia-smi -q'))
    csv = [normalize_query_row(r)
           for r in parse_query_csv(capture_section(H200_CAP, 'nvidia-smi --query-gpu=timestamp'))]
    monkeypatch.setattr(gpu_health, '_import_pynvml', lambda: make_fake_pynvml(merge_records(csv, q)))
    nvml_res, nvml_failed, r = run_module(gpu_health.main, {'expected': expected},
                                          {(lambda a: a == ['/usr/bin/dmesg']): (0, '', '')})
    assert (smi_res['source'], nvml_res['source']) == ('nvidia-smi', 'nvml') and r.calls == [['/usr/bin/dmesg']]
    assert nvml_res['checks'] == smi_res['checks'] and nvml_res['verdict'] == smi_res['verdict']
    assert nvml_failed == smi_failed == (expected['gpu_count'] != 1)


# ---- gpu_settings ----------------------------------------------------------

class FakeSmi:
    """Stateful nvidia-smi: answers the settings query from state and applies -pm/-pl/-ac."""

    def __init__(self, n=2, limit=700.0, pm='Disabled', clocks=('[N/A]', '[N/A]')):
        self.gpus = [{'pm': pm, 'pl': limit, 'ac': clocks} for _ in range(n)]

    def responses(self):
        def query(args):
            rows = ['%d, %s, %.2f, 200.00, 700.00, %s, %s' % (i, g['pm'], g['pl'], g['ac'][0], g['ac'][1])
                    for i, g in enumerate(self.gpus)]
            return 0, '\n'.join(rows) + '\n', ''

        def setter(args):
            g = self.gpus[int(args[2])]
            if args[3] == '-pm':
                g['pm'] = 'Enabled' if args[4] == '1' else 'Disabled'
            elif args[3] == '-pl':
                g['pl'] = float(args[4])
            elif args[3] == '-ac':
                g['ac'] = tuple(args[4].split(','))
            return 0, 'ok', ''
        return {(lambda a: a[1].startswith('--query-gpu=')): query, (lambda a: a[1] == '-i'): setter}


def test_settings_changes_then_idempotent():
    smi = FakeSmi()
    args = {'persistence_mode': True, 'power_limit_watts': {'1': 600}}
    res, failed, r = run_module(gpu_settings.main, args, smi.responses())
    assert not failed and res['changed'] is True
    assert r.calls[0] == [SMI, '--query-gpu=index,persistence_mode,power.limit,power.min_limit,power.max_limit,'
                          'clocks.applications.memory,clocks.applications.graphics', '--format=csv,noheader,nounits']
    assert r.calls[1:] == [[SMI, '-i', '0', '-pm', '1'], [SMI, '-i', '1', '-pm', '1'], [SMI, '-i', '1', '-pl', '600']]
    assert res['diff']['before']['GPU1']['power_limit_watts'] == 700
    assert res['diff']['after']['GPU1']['power_limit_watts'] == 600
    assert res['diff']['after']['GPU0']['persistence_mode'] is True
    res, failed, r = run_module(gpu_settings.main, args, smi.responses())
    assert not failed and res['changed'] is False and res['changes'] == [] and len(r.calls) == 1


def test_settings_check_mode_runs_no_setter():
    smi = FakeSmi()
    res, failed, r = run_module(gpu_settings.main, {'power_limit_watts': 650}, smi.responses(), check_mode=True)
    assert not failed and res['changed'] is True
    assert len(r.calls) == 1 and all(g['pl'] == 700.0 for g in smi.gpus)
    assert [c['argv'] for c in res['changes']] == [[SMI, '-i', '0', '-pl', '650'], [SMI, '-i', '1', '-pl', '650']]


def test_settings_float_compare_and_budget():
    smi = FakeSmi(n=3, limit=700.0)
    res, failed, r = run_module(gpu_settings.main, {'power_limit_watts': 700}, smi.responses())
    assert res['changed'] is False  # "700.00" == 700
    res, failed, r = run_module(gpu_settings.main, {'node_power_budget_watts': 2000}, smi.responses())
    assert [c['after'] for c in res['changes']] == [666, 666, 666]  # floored


def test_settings_out_of_range_changes_nothing():
    smi = FakeSmi(n=4)
    res, failed, r = run_module(gpu_settings.main, {'persistence_mode': True, 'power_limit_watts': {3: 800}},
                                smi.responses())
    assert failed and res['msg'] == 'GPU3: power limit 800 W outside 200-700 W'
    assert len(r.calls) == 1 and res['changed'] is False


def test_settings_application_clocks():
    smi = FakeSmi(clocks=('1215', '1410'))
    res, failed, r = run_module(gpu_settings.main, {'application_clocks': {'memory_mhz': 1593, 'graphics_mhz': 1410}},
                                smi.responses())
    assert [c['argv'] for c in res['changes']] == [[SMI, '-i', '0', '-ac', '1593,1410'],
                                                   [SMI, '-i', '1', '-ac', '1593,1410']]
    res, failed, r = run_module(gpu_settings.main, {'application_clocks': {'memory_mhz': 1593, 'graphics_mhz': 1410}},
                                smi.responses())
    assert res['changed'] is False


@pytest.mark.parametrize('args,match', [
    ({'power_limit_watts': {'7': 600}}, 'names GPU 7'),
    ({'power_limit_watts': 'lots'}, 'must be an integer'),
    ({'application_clocks': {'memory_mhz': 1, 'graphics_mhz': 2}}, 'not supported'),
])
def test_settings_bad_requests(args, match):
    res, failed, r = run_module(gpu_settings.main, args, FakeSmi().responses())
    assert failed and match in res['msg'] and all(c[1] != '-i' for c in r.calls)


def test_settings_malformed_query():
    res, failed, _ = run_module(gpu_settings.main, {'persistence_mode': True},
                                {(lambda a: True): (0, '0, Enabled, 700.00\n', '')})
    assert failed and 'expected 7 fields, found 3' in res['msg']


def test_settings_setter_failure():
    resp = FakeSmi().responses()
    resp = {k: v for k, v in resp.items()}
    for k in list(resp):
        if k(['x', '-i']):
            resp[k] = (6, '', 'Insufficient Permissions')
    res, failed, _ = run_module(gpu_settings.main, {'persistence_mode': True}, resp)
    assert failed and 'GPU0: setting persistence_mode to True failed (rc=6): Insufficient Permissions' == res['msg']


# ---- rdma_health -----------------------------------------------------------

def _sysfs(tmp_path, devs, mtu=9000, ndev_file=True, gid_type='RoCE v2'):
    ib = tmp_path / 'infiniband'
    net = tmp_path / 'net'
    for i, dev in enumerate(devs):
        p = ib / dev / 'ports' / '1'
        (p / 'gids').mkdir(parents=True)
        (p / 'gid_attrs' / 'types').mkdir(parents=True)
        (p / 'gid_attrs' / 'ndevs').mkdir(parents=True)
        (p / 'state').write_text('4: ACTIVE\n')
        (p / 'phys_state').write_text('5: LinkUp\n')
        (p / 'rate').write_text('200 Gb/sec (4X HDR)\n')
        (p / 'link_layer').write_text('Ethernet\n')
        (p / 'gids' / '3').write_text('0000:0000:0000:0000:0000:ffff:0a00:%04x\n' % i)
        (p / 'gid_attrs' / 'types' / '3').write_text(gid_type + '\n')
        nd = 'rail%d' % i
        if ndev_file:
            (p / 'gid_attrs' / 'ndevs' / '3').write_text(nd + '\n')
        else:
            (ib / dev / 'device' / 'net' / nd).mkdir(parents=True)
        (net / nd).mkdir(parents=True)
        (net / nd / 'mtu').write_text('%d\n' % mtu)
    return str(ib), str(net)


EXPECT = {'state': 'ACTIVE', 'link_layer': 'Ethernet', 'netdev_mtu': 9000, 'active_mtu': 4096,
          'min_rate_gbps': 100, 'gid_index': 3, 'gid_type': 'RoCE v2', 'port_count': 2}


def test_rdma_ok(tmp_path):
    ib, net = _sysfs(tmp_path, ['mlx5_0', 'mlx5_1'])
    res, failed, r = run_module(rdma_health.main, {'infiniband_root': ib, 'net_root': net, 'expected': EXPECT},
                                {}, bins={})
    assert not failed, res.get('msg')
    assert r.calls == []
    p = res['ports'][0]
    assert (p['device'], p['port'], p['state'], p['rate_gbps'], p['netdev'], p['netdev_mtu'], p['active_mtu'],
            p['active_mtu_source'], p['gid_type']) == ('mlx5_0', 1, '4: ACTIVE', 200.0, 'rail0', 9000, 4096,
                                                       'derived', 'RoCE v2')
    assert res['summary']['verdict'] == 'ok' and res['mismatches'] == []


def test_rdma_mismatches(tmp_path):
    ib, net = _sysfs(tmp_path, ['mlx5_0', 'mlx5_1'], mtu=1500, ndev_file=False, gid_type='IB/RoCE v1')
    res, failed, _ = run_module(rdma_health.main, {'infiniband_root': ib, 'net_root': net,
                                                   'devices': ['mlx5_0', 'mlx5_9'], 'expected': EXPECT}, {}, bins={})
    assert failed
    mm = res['mismatches']
    assert {'item': 'mlx5_0/1', 'check': 'netdev_mtu', 'expected': 9000, 'found': 1500} in mm
    assert {'item': 'mlx5_0/1', 'check': 'active_mtu', 'expected': 4096, 'found': 1024} in mm
    assert {'item': 'mlx5_0/1', 'check': 'gid_type', 'expected': 'RoCE v2', 'found': 'IB/RoCE v1'} in mm
    assert any(m['item'] == 'mlx5_9' for m in mm)
    assert {'item': 'node', 'check': 'port_count', 'expected': 2, 'found': 1} in mm
    assert res['ports'][0]['netdev'] == 'rail0'  # fell back to device/net/*
    assert 'mlx5_0/1 netdev_mtu expected 9000 found 1500' in res['msg']


QOS_DSCP_PFC3 = fixture('mlnx_qos_i_dscp_pfc3_buffers_mlx5_ens14f0_magnate3.txt')
QOS_PCP_OFF = fixture('mlnx_qos_i_pcp_default_524160buf_mlx5_centos12_magnate3.txt')


def test_rdma_qos_ok_and_drift_named(tmp_path):
    ib, net = _sysfs(tmp_path, ['mlx5_0', 'mlx5_1'])
    want = {'gid_index': 3, 'qos_trust': 'dscp', 'pfc_priorities': [3]}
    res, failed, r = run_module(rdma_health.main, {'infiniband_root': ib, 'net_root': net, 'expected': want},
                                {('-i', 'rail0'): (0, QOS_DSCP_PFC3, ''), ('-i', 'rail1'): (0, QOS_PCP_OFF, '')},
                                bins={'mlnx_qos': '/usr/bin/mlnx_qos'})
    assert failed and r.calls == [['/usr/bin/mlnx_qos', '-i', 'rail0'], ['/usr/bin/mlnx_qos', '-i', 'rail1']]
    by = dict(((c['subject'], c['name']), c) for c in res['checks'])
    assert by[('mlx5_0/1', 'qos_trust')]['status'] == 'ok' and by[('mlx5_0/1', 'pfc')]['measured'] == [3]
    assert by[('mlx5_1/1', 'qos_trust')]['status'] == 'fail' and by[('mlx5_1/1', 'qos_trust')]['measured'] == 'pcp'
    assert by[('mlx5_1/1', 'pfc')]['reason'] == 'mlnx_qos -i rail1: PFC on priorities none, expected [3]'
    assert {'item': 'mlx5_1/1', 'check': 'qos_trust', 'expected': 'dscp', 'found': 'pcp'} in res['mismatches']


@pytest.mark.parametrize('bins,answer,reason', [
    ({}, None, 'mlnx_qos is not installed'),
    ({'mlnx_qos': '/usr/bin/mlnx_qos'}, (1, '', 'Netlink error'), 'mlnx_qos -i rail0 exited 1: Netlink error'),
    ({'mlnx_qos': '/usr/bin/mlnx_qos'}, (0, QOS_DSCP_PFC3.replace('Priority trust state: dscp', ''), ''),
     "one 'Priority trust state:' line, found 0"),
])
def test_rdma_qos_fails_closed(tmp_path, bins, answer, reason):
    ib, net = _sysfs(tmp_path, ['mlx5_0'])
    res, failed, _ = run_module(rdma_health.main, {'infiniband_root': ib, 'net_root': net,
                                                   'expected': {'gid_index': 3, 'qos_trust': 'dscp',
                                                                'pfc_priorities': [3]}},
                                {('-i', 'rail0'): answer} if answer else {}, bins=bins)
    qos = [c for c in res['checks'] if c['name'] in ('qos_trust', 'pfc')]
    assert failed and len(qos) == 2 and all(c['status'] == 'fail' and reason in c['reason'] for c in qos), qos


def test_rdma_ibv_devinfo_used(tmp_path):
    ib, net = _sysfs(tmp_path, ['mlx5_0'])
    out = 'hca_id:\tmlx5_0\n\tport:\t1\n\t\tactive_mtu:\t1024 (3)\n'
    res, failed, r = run_module(rdma_health.main, {'infiniband_root': ib, 'net_root': net,
                                                   'expected': {'active_mtu': 4096}},
                                {('-d', 'mlx5_0'): (0, out, '')}, bins={'ibv_devinfo': '/usr/bin/ibv_devinfo'})
    assert r.calls == [['/usr/bin/ibv_devinfo', '-d', 'mlx5_0']]
    assert failed and res['ports'][0]['active_mtu_source'] == 'ibv_devinfo'


def test_rdma_bad_sysfs_is_clean(tmp_path):
    ib, net = _sysfs(tmp_path, ['mlx5_0'])
    with open(os.path.join(ib, 'mlx5_0', 'ports', '1', 'state'), 'w') as f:
        f.write('garbage\n')
    res, failed, _ = run_module(rdma_health.main, {'infiniband_root': ib, 'net_root': net}, {}, bins={})
    assert failed and "mlx5_0 port 1 state: cannot parse 'garbage'" in res['msg']
    res, failed, _ = run_module(rdma_health.main, {'infiniband_root': str(tmp_path / 'none')}, {}, bins={})
    assert failed and 'cannot list RDMA devices' in res['msg']


@pytest.mark.parametrize('attr', ['state', 'rate', 'link_layer', os.path.join('gid_attrs', 'types', '3')])
def test_rdma_undecodable_sysfs_bytes_fail_naming_the_file(tmp_path, attr):
    ib, net = _sysfs(tmp_path, ['mlx5_0'])
    path = os.path.join(ib, 'mlx5_0', 'ports', '1', attr)
    with open(path, 'wb') as f:
        f.write(b'4: ACT\xff\xfeIVE\n')
    res, failed, _ = run_module(rdma_health.main, {'infiniband_root': ib, 'net_root': net, 'expected': EXPECT},
                                {}, bins={})
    assert failed and res['msg'] == "cannot parse RDMA sysfs: %s holds bytes that are not UTF-8: %r" % (
        path, b'4: ACT\xff\xfeIVE\n')


def test_rdma_checks_in_the_one_result_format(tmp_path):
    ib, net = _sysfs(tmp_path, ['mlx5_0', 'mlx5_1'], mtu=1500)
    res, failed, _ = run_module(rdma_health.main, {'infiniband_root': ib, 'net_root': net, 'devices':
                                                   ['mlx5_0', 'mlx5_1', 'mlx5_7'], 'expected': EXPECT}, {}, bins={})
    assert failed and res['verdict'] == 'fail'
    bad = [(c['subject'], c['name'], c['measured'], c['expected']) for c in res['checks'] if c['status'] == 'fail']
    assert bad == [('mlx5_7', 'present', 'absent', 'present in %s' % ib),
                   ('mlx5_0/1', 'netdev_mtu', 1500, 9000), ('mlx5_0/1', 'active_mtu', 1024, 4096),
                   ('mlx5_1/1', 'netdev_mtu', 1500, 9000), ('mlx5_1/1', 'active_mtu', 1024, 4096)], bad
    assert ('mlx5_0/1', 'state', 'ok') in [(c['subject'], c['name'], c['status']) for c in res['checks']]
