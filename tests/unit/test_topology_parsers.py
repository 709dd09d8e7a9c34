# -*- coding: utf-8 -*-
"""Table-driven tests of the nvidia-smi topo -m / nvlink -s / nvlink -e parsers."""

import pytest
from ansible.module_utils.gpu_parsers import (ParseError, parse_nvlink_errors, parse_nvlink_status,
                                              parse_topo_matrix, split_capture_sections)

from helpers import capture_section, fixture

H200 = 'topo_h200_8gpu_12nic_nv18_distributedai.txt'

# fixture, gpu_count, nics, {(a, b): code}, cpu_affinity GPU0, numa_affinity GPU0, gpu_numa_id GPU0, legend
TOPO_CASES = [
    (H200, 8, ['mlx5_%d' % i for i in range(12)],
     {('GPU0', 'GPU1'): 'NV18', ('GPU0', 'mlx5_0'): 'PXB', ('GPU1', 'mlx5_3'): 'PXB', ('GPU7', 'mlx5_11'): 'PXB',
      ('GPU0', 'mlx5_6'): 'SYS', ('mlx5_1', 'mlx5_2'): 'PIX', ('GPU4', 'mlx5_7'): 'NODE'},
     '0-55,112-167', '0', 'N/A', 'new'),
    ('topo_2gpu_nv2_nolegend_mlengineering.txt', 2, [], {('GPU0', 'GPU1'): 'NV2'}, '0-23', 'N/A', '', 'none'),
    ('topo_2x1080ti_phb_spaces_xuesongtap.txt', 2, [], {('GPU0', 'GPU1'): 'PHB'}, '0-11', 'N/A', '', 'new'),
    ('topo_2xA100pcie_mlx5cols_sys_della.txt', 2, ['mlx5_0', 'mlx5_1'],
     {('GPU0', 'GPU1'): 'SYS', ('GPU0', 'mlx5_0'): 'NODE', ('GPU1', 'mlx5_1'): 'NODE', ('mlx5_0', 'mlx5_1'): 'SYS'},
     '0-63', '0', '', 'new'),
    ('topo_3xRTXA6000_nv4bridge_ansi_siboehm.txt', 3, [],
     {('GPU0', 'GPU1'): 'NV4', ('GPU0', 'GPU2'): 'NODE', ('GPU1', 'GPU2'): 'NODE'}, '0-31,64-95', '0', '', 'new'),
    ('topo_4xA10_sys_2nic_spaces_xuesongtap.txt', 4, ['mlx5_0', 'mlx5_1'],
     {('GPU0', 'GPU3'): 'SYS', ('GPU2', 'mlx5_1'): 'SYS', ('mlx5_0', 'mlx5_1'): 'PIX'}, '0-127', '0', 'N/A', 'new'),
    ('topo_4xV100_power9_nv3_mlx5cols_traverse.txt', 4, ['mlx5_0', 'mlx5_1', 'mlx5_2', 'mlx5_3'],
     {('GPU0', 'GPU1'): 'NV3', ('GPU2', 'GPU3'): 'NV3', ('GPU0', 'GPU2'): 'SYS', ('GPU2', 'mlx5_2'): 'NODE'},
     '0-63', '0', '', 'new'),
    ('topo_a100_8gpu_17nic_nv12_bond_spaces_xuesongtap.txt', 8, None,
     {('GPU0', 'GPU7'): 'NV12', ('GPU0', 'mlx5_2'): 'PXB', ('GPU7', 'mlx5_17'): 'PXB', ('GPU0', 'mlx5_bond_0'): 'SYS'}, '0-103', '0', 'N/A', 'new'),
    ('topo_a100_8gpu_nv12_compact_mlengineering.txt', 8, [], {('GPU3', 'GPU4'): 'NV12'}, '0-23', '0', '', 'none'),
    ('topo_dgx1v_8gpu_hybridcube_nv1nv2_mlx5cols_oldlegend_msccl.txt', 8, ['mlx5_0', 'mlx5_2', 'mlx5_1', 'mlx5_3'],
     {('GPU0', 'GPU1'): 'NV1', ('GPU0', 'GPU3'): 'NV2', ('GPU0', 'GPU5'): 'SYS', ('GPU0', 'mlx5_0'): 'PIX',
      ('GPU0', 'mlx5_1'): 'PHB', ('GPU4', 'mlx5_2'): 'PIX'}, '0-19,40-59', '', '', 'old'),
    ('topo_h100_1gpu_vm_590_nvgpuexporter.txt', 1, [], {}, '0-19', '0', 'N/A', 'new'),
    ('topo_h100_8gpu_nv18_compact_mlengineering.txt', 8, [], {('GPU0', 'GPU7'): 'NV18'}, '0-51', '0', '', 'none'),
    ('topo_h100_8gpu_nv18_nolegend_mlengineering_perf.txt', 8, [], {('GPU5', 'GPU6'): 'NV18'},
     '0-51,104-155', '0', '', 'none'),
    ('topo_h200_1gpu_vm_590_nvgpuexporter.txt', 1, [], {}, '0-23', '0', 'N/A', 'new'),
    ('topo_l40s_1gpu_595_nvgpuexporter.txt', 1, [], {}, '0-7', '0', 'N/A', 'new'),
]


@pytest.mark.parametrize('name,count,nics,links,cpu0,numa0,gnuma0,legend', TOPO_CASES,
                         ids=[c[0] for c in TOPO_CASES])
def test_topo_fixture(name, count, nics, links, cpu0, numa0, gnuma0, legend):
    t = parse_topo_matrix(fixture(name))
    assert t['gpu_count'] == count
    assert t['gpus'] == ['GPU%d' % i for i in range(count)]
    if nics is not None:
        assert t['nics'] == nics
    for (a, b), code in links.items():
        assert t['links'][a][b] == code
        assert t['links'][b][a] == code  # symmetric
    for g in t['gpus']:
        assert g not in t['links'][g]  # self omitted
        assert set(t['links'][g]) == set(t['gpus'] + t['nics']) - {g}
    assert t['cpu_affinity']['GPU0'] == cpu0
    assert t['numa_affinity']['GPU0'] == numa0
    assert t['gpu_numa_id']['GPU0'] == gnuma0
    assert t['legend_style'] == legend


def test_a100_17nic_legend_names_and_bond():
    t = parse_topo_matrix(fixture('topo_a100_8gpu_17nic_nv12_bond_spaces_xuesongtap.txt'))
    assert len(t['nics']) == 17
    assert t['nic_columns'][0] == 'NIC0'
    assert 'mlx5_bond_0' in t['nics']
    assert all(not n.startswith('NIC') for n in t['nics'])


def test_h200_affinity_all_gpus():
    t = parse_topo_matrix(fixture(H200))
    assert [t['numa_affinity']['GPU%d' % i] for i in range(8)] == ['0'] * 4 + ['1'] * 4
    assert t['cpu_affinity']['GPU7'] == '56-111,168-223'
    assert t['affinity_columns'] == ['CPU Affinity', 'NUMA Affinity', 'GPU NUMA ID']


def test_empty_tab_field_is_empty_string():
    text = '\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV4\t\t0\nGPU1\tNV4\t X \t0-7\t\n'
    t = parse_topo_matrix(text)
    assert t['cpu_affinity'] == {'GPU0': '', 'GPU1': '0-7'}
    assert t['numa_affinity'] == {'GPU0': '0', 'GPU1': ''}


CAPTURES = [
    ('linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt', 18, 'active'),
    ('linux-x86_64__nvidia-h200__590.48.01.txt', 18, 'active'),
    ('linux-x86_64__nvidia-l40s__595.80.txt', 0, 'unsupported'),
    ('linux-x86_64__nvidia-h100-mig__590.48.01.txt', 0, 'unsupported'),
    ('linux-x86_64__nvidia-h200-mig__590.48.01.txt', 0, 'unsupported'),
    ('linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05.txt', 0, 'inactive'),
    ('linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt', 0, 'inactive'),
    ('linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt', 0, 'unsupported'),
]


@pytest.mark.parametrize('name,nlinks,kind', CAPTURES, ids=[c[0] for c in CAPTURES])
def test_capture_topo_and_nvlink_sections(name, nlinks, kind):
    t = parse_topo_matrix(capture_section(name, 'nvidia-smi topo -m'))
    assert t['gpu_count'] == 1 and t['numa_affinity']['GPU0'] == '0' and t['gpu_numa_id']['GPU0'] == 'N/A'
    s = parse_nvlink_status(capture_section(name, 'nvidia-smi nvlink -s'))['GPU0']
    assert len(s['links']) == nlinks
    assert s['supported'] == (kind != 'unsupported')
    assert s['all_inactive'] == (kind == 'inactive')
    if nlinks:
        assert s['links'][17] == {'link': 17, 'speed_gbps': 26.562, 'state': 'active'}


def test_split_capture_sections_matches_helper():
    name = 'linux-x86_64__nvidia-h200__590.48.01.txt'
    secs = split_capture_sections(fixture('nvidia_gpu_exporter_captures/' + name))
    assert secs['nvidia-smi topo -m'] == capture_section(name, 'nvidia-smi topo -m')
    assert 'nvidia-smi -q' in secs


def test_windows_capture_topo_is_a_clean_error():
    text = capture_section('windows-x86_64__nvidia-geforce-rtx-2080-super__591.86.txt', 'nvidia-smi topo -m')
    with pytest.raises(ParseError, match='does not start with GPU0'):
        parse_topo_matrix(text)


def _truncate_row(text, row, keep):
    out = []
    for line in text.splitlines():
        if line.startswith(row + '\t'):
            line = '\t'.join(line.split('\t')[:keep])
        out.append(line)
    return '\n'.join(out)


@pytest.mark.parametrize('text,match', [
    ('', 'empty'),
    ('garbage\n', 'does not start with GPU0'),
    (_truncate_row(fixture(H200), 'GPU3', 6), r'row GPU3 .*expected 20 link fields, found 5'),
    ('\n'.join(fixture(H200).splitlines()[:4]), 'no matrix row for GPU3'),
    (fixture(H200).replace('NV18', 'NVXX', 1), "row GPU0 column GPU1: unknown link code 'NVXX'"),
    (fixture(H200).replace('\nGPU2\t', '\nGPUX\t', 1), "row 'GPUX' is not a column"),
    (fixture(H200).replace('GPU0\t X ', 'GPU0\tPIX', 1), 'self entry'),
], ids=['empty', 'garbage', 'truncated-row', 'missing-rows', 'bad-code', 'bad-row-name', 'bad-self'])
def test_topo_malformed(text, match):
    with pytest.raises(ParseError, match=match):
        parse_topo_matrix(text)


# fixture, {gpu: (n links, supported, all_inactive, speed of link 0)}
NVLINK_S_CASES = [
    ('nvlink_s_3xRTXA6000_one_gpu_inactive_siboehm.txt',
     {'GPU0': (4, True, False, 14.062), 'GPU1': (4, True, False, 14.062), 'GPU2': (0, True, True, None)}),
    ('nvlink_s_h100_1gpu_vm_590_nvgpuexporter.txt', {'GPU0': (18, True, False, 26.562)}),
    ('nvlink_s_h200_1gpu_vm_590_nvgpuexporter.txt', {'GPU0': (18, True, False, 26.562)}),
    ('nvlink_s_l40s_1gpu_595_nvgpuexporter.txt', {'GPU0': (0, False, False, None)}),
    ('nvlink_status_a100_gpu6_all_inactive_aznhc.txt', {'GPU6': (0, True, True, None)}),
    ('nvlink_status_a100_gpu7_good_aznhc.txt', {'GPU7': (12, True, False, 25.0)}),
    ('gpud/nvidia-smi.nvlink.status.a100', dict(('GPU%d' % i, (12, True, False, 25.0)) for i in range(8))),
]


@pytest.mark.parametrize('name,expect', NVLINK_S_CASES, ids=[c[0] for c in NVLINK_S_CASES])
def test_nvlink_status_fixture(name, expect):
    s = parse_nvlink_status(fixture(name))
    assert sorted(s) == sorted(expect)
    for g, (n, supported, inactive, speed) in expect.items():
        assert len(s[g]['links']) == n
        assert s[g]['supported'] is supported
        assert s[g]['all_inactive'] is inactive
        assert all(link['state'] == 'active' for link in s[g]['links'])
        if speed is not None:
            assert s[g]['links'][0]['speed_gbps'] == speed


def test_nvlink_status_uuid_and_inactive_link():
    text = 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n'
    s = parse_nvlink_status(text)['GPU0']
    assert s['uuid'] == 'GPU-1' and s['name'] == 'NVIDIA H100 80GB HBM3'
    assert s['links'][1] == {'link': 1, 'speed_gbps': 0.0, 'state': 'inactive'}


@pytest.mark.parametrize('text,match', [
    ('', 'empty'),
    ('\t Link 0: 25 GB/s\n', 'expected "GPU <n>: ..." header'),
    ('GPU 0: X (UUID: U)\n\t Link 0: fast\n', 'GPU 0 link 0: cannot parse speed'),
    ('GPU 0: X (UUID: U)\n\t Lnk 0 25\n', 'GPU 0 line 2'),
])
def test_nvlink_status_malformed(text, match):
    with pytest.raises(ParseError, match=match):
        parse_nvlink_status(text)


def test_nvlink_errors_fixture():
    e = parse_nvlink_errors(fixture('nvlink_e_h100_gpu0_elided_mlengineering.txt'))
    g = e['GPU0']
    assert g['uuid'].startswith('GPU-abcdefab')
    assert sorted(g['links']) == [0, 1, 17]
    assert g['links'][17] == {'replay_errors': 0, 'recovery_errors': 0, 'crc_errors': 0}


def test_nvlink_errors_malformed():
    with pytest.raises(ParseError, match='GPU 0 link 3 CRC Errors: not a number'):
        parse_nvlink_errors('GPU 0: H100 (UUID: U)\n  Link 3: CRC Errors: lots\n')
