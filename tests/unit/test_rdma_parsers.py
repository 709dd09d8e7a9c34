# -*- coding: utf-8 -*-
"""Table-driven tests of the ibstat, show_gids, ibdev2netdev and MTU helpers."""

import pytest
from ansible.module_utils.gpu_parsers import ParseError
from ansible.module_utils.rdma_parsers import (parse_ibdev2netdev, parse_ibstat, parse_ibv_devinfo_mtu,
                                               parse_mlnx_qos, parse_show_gids, parse_sysfs_rate, parse_sysfs_state,
                                               roce_active_mtu)

from helpers import fixture
from hypothesis import given, strategies as st

# fixture, CA count, {ca: (state, physical_state, rate, link_layer)}, error substring or None
IBSTAT_CASES = [
    ('gpud/ibstat.39.0.a100.failed.ibpanic.exit-255.0', 8,
     {'mlx5_0': ('Active', 'LinkUp', 200, 'InfiniBand')}, "stat of IB device 'mlx5_8' failed"),
    ('gpud/ibstat.47.0.a100.all.active.0', 9, {'mlx5_0': ('Active', 'LinkUp', 200, 'Ethernet'),
                                               'mlx5_1': ('Active', 'LinkUp', 200, 'InfiniBand')}, None),
    ('gpud/ibstat.47.0.h100.all.active.0', 12, {'mlx5_1': ('Active', 'LinkUp', 100, 'Ethernet')}, None),
    ('gpud/ibstat.47.0.h100.some.down.0', 12, {'mlx5_0': ('Active', 'LinkUp', 400, 'InfiniBand')}, None),
    ('gpud/ibstat.47.0.h100.some.down.1', 12, {}, None),
]


@pytest.mark.parametrize('name,count,ports,error', IBSTAT_CASES, ids=[c[0] for c in IBSTAT_CASES])
def test_ibstat_fixture(name, count, ports, error):
    r = parse_ibstat(fixture(name))
    assert len(r['cas']) == count
    for ca, (state, phys, rate, layer) in ports.items():
        p = r['cas'][ca]['ports'][1]
        assert (p['state'], p['physical_state'], p['rate'], p['link_layer']) == (state, phys, rate, layer)
    if error:
        assert error in r['error']
    else:
        assert r['error'] is None


@pytest.mark.parametrize('name', ['gpud/ibstat.47.0.h100.some.down.0', 'gpud/ibstat.47.0.h100.some.down.1'])
def test_ibstat_some_down(name):
    r = parse_ibstat(fixture(name))
    states = [c['ports'][1]['state'] for c in r['cas'].values()]
    assert 'Down' in states and 'Active' in states


def test_ibstat_ca_fields():
    ca = parse_ibstat(fixture('gpud/ibstat.47.0.h100.some.down.0'))['cas']['mlx5_0']
    assert ca['ca_type'] == 'MT4129' and ca['number_of_ports'] == 1 and ca['firmware_version'] == '28.39.1002'


@pytest.mark.parametrize('text,match', [
    ('', 'empty'),
    ('\tCA type: MT4129\n', "expected \"CA '<name>'\""),
    ("CA 'mlx5_0'\n\tNumber of ports: 2\n\tPort 1:\n\t\tState: Active\n", 'Number of ports: 2" but 1 port'),
    ("CA 'mlx5_0'\n\tPort 1:\n\t\tRate: fast\n", 'mlx5_0 Rate: not a number'),
    ("CA 'mlx5_0'\n\t???\n", 'CA mlx5_0 line 2: cannot parse'),
])
def test_ibstat_malformed(text, match):
    with pytest.raises(ParseError, match=match):
        parse_ibstat(text)


def test_show_gids_fixture():
    g = parse_show_gids(fixture('show_gids_roce_1port_v1v2_ipv4_husky.txt'))
    assert len(g) == 4
    assert g[3] == {'dev': 'mlx5_0', 'port': 1, 'index': 3, 'gid': '0000:0000:0000:0000:0000:ffff:c0a8:d3f2',
                    'ipv4': '192.168.211.242', 'ver': 'v2', 'netdev': 'rdma0'}
    assert g[0]['ipv4'] == '' and g[0]['ver'] == 'v1'


def test_show_gids_malformed():
    text = fixture('show_gids_roce_1port_v1v2_ipv4_husky.txt')
    with pytest.raises(ParseError, match='n_gids_found=4 but 3'):
        parse_show_gids('\n'.join(line for line in text.splitlines() if '\t3\t' not in line))
    with pytest.raises(ParseError, match='line 1: expected 6 or 7 columns'):
        parse_show_gids('mlx5_0 1 0\n')


IBDEV_CASES = [
    ('ibdev2netdev_h100_8ib_4eth_columnt_commented_imbue.txt', 12,
     {'mlx5_0': ('ibp26s0', False), 'mlx5_1': ('enp27s0f0np0', True), 'mlx5_11': ('ibp220s0', False)}),
    ('ibdev2netdev_h20_ib_bf3_bond_stepmesh15.txt', 7,
     {'mlx5_bond_0': ('bond0', True), 'mlx5_0': ('ibs108', False), 'mlx5_2': ('ens12f1np1', True)}),
]


@pytest.mark.parametrize('name,count,expect', IBDEV_CASES, ids=[c[0] for c in IBDEV_CASES])
def test_ibdev2netdev_fixture(name, count, expect):
    rows = parse_ibdev2netdev(fixture(name))
    assert len(rows) == count
    by = dict((r['dev'], r) for r in rows)
    for dev, (nd, up) in expect.items():
        assert (by[dev]['netdev'], by[dev]['up'], by[dev]['port']) == (nd, up, 1)


def test_ibdev2netdev_malformed():
    with pytest.raises(ParseError, match='line 2: cannot parse'):
        parse_ibdev2netdev('mlx5_0 port 1 ==> ib0 (Up)\nmlx5_1 port one\n')


@pytest.mark.parametrize('mtu,ib', [(9000, 4096), (4200, 4096), (4192, 4096), (4191, 2048), (4000, 2048),
                                    (1500, 1024), (1000, 512), (300, None), (None, None)])
def test_roce_active_mtu(mtu, ib):
    assert roce_active_mtu(mtu) == ib


def test_sysfs_values():
    assert parse_sysfs_state('4: ACTIVE', 's') == (4, 'ACTIVE')
    assert parse_sysfs_state('5: LinkUp', 's') == (5, 'LinkUp')
    assert parse_sysfs_rate('200 Gb/sec (4X HDR)', 'r') == 200.0
    with pytest.raises(ParseError, match='mlx5_0 state: cannot parse'):
        parse_sysfs_state('ACTIVE', 'mlx5_0 state')
    with pytest.raises(ParseError, match='cannot parse rate'):
        parse_sysfs_rate('fast', 'r')


def test_ibv_devinfo_mtu():
    text = 'hca_id:\tmlx5_0\n\tport:\t1\n\t\tstate:\t\tPORT_ACTIVE (4)\n\t\tmax_mtu:\t4096 (5)\n' \
           '\t\tactive_mtu:\t1024 (3)\n'
    assert parse_ibv_devinfo_mtu(text, 1) == 1024
    with pytest.raises(ParseError):
        parse_ibv_devinfo_mtu(text, 2)


# ---- mlnx_qos --------------------------------------------------------------

# every recorded mlnx_qos output: (fixture, trust, priorities with PFC on)
MLNX_QOS_CASES = [
    ('mlnx_qos_i_dcbx_fw_controlled_ets50_50_pfc3_cx5_doca32_sn2700blog.txt', 'dscp', [3]),
    ('mlnx_qos_i_dscp_pfc3_buffers_mlx5_ens14f0_magnate3.txt', 'dscp', [3]),
    ('mlnx_qos_i_ets_strict_custom_dscp2prio_pfc5_cx7_ofed2310_3fsnotes.txt', 'dscp', [5]),
    ('mlnx_qos_i_p2p2_cx5_ofed51_dscp_pfc3_tabs_lshca.txt', 'dscp', [3]),
    ('mlnx_qos_i_pcp_default_262016buf_mlx5_cpugl13_magnate3.txt', 'pcp', []),
    ('mlnx_qos_i_pcp_default_524160buf_mlx5_centos12_magnate3.txt', 'pcp', []),
    ('mlnx_qos_pfc_0001_after_trust_dscp_mlx5_ofed4x_netarbiter.txt', 'dscp', [3]),
    ('mlnx_qos_pfc_0001_dscp30_remapped_prio6_buffers_mlx5_ens14f0_magnate3.txt', 'dscp', [3]),
    ('mlnx_qos_ratelimit_gbps_pcp_default_prio_empty_trimmed_magnate3.txt', 'pcp', []),
    ('mlnx_qos_trust_dscp_mlx5_ofed4x_netarbiter.txt', 'dscp', [3]),
    ('mlnx_qos_trust_dscp_pfc_off_mlx5_centos12_magnate3.txt', 'dscp', []),
    ('mlnx_qos_trust_pcp_pfc3_buffers_mlx5_ens14f0_magnate3.txt', 'pcp', [3]),
]


@pytest.mark.parametrize('name,trust,pfc', MLNX_QOS_CASES, ids=[c[0][:40] for c in MLNX_QOS_CASES])
def test_mlnx_qos_fixture(name, trust, pfc):
    q = parse_mlnx_qos(fixture(name))
    assert q['trust'] == trust and [i for i, v in enumerate(q['pfc']) if v] == pfc and len(q['pfc']) == 8


def test_mlnx_qos_dcbx_mode():
    assert parse_mlnx_qos(fixture(MLNX_QOS_CASES[0][0]))['dcbx'] == 'Firmware controlled'
    assert parse_mlnx_qos(fixture(MLNX_QOS_CASES[1][0]))['dcbx'] == 'OS controlled'


@pytest.mark.parametrize('old,new,error', [
    ('Priority trust state: dscp', 'Priority trust state: both', "trust state 'both'"),
    ('Priority trust state: dscp', '', "one 'Priority trust state:' line, found 0"),
    ('PFC configuration:', 'PFC config:', "no 'PFC configuration:' section"),
    ('enabled     0   0   0   1', 'enabled     0   0   0   N/A', "is not eight 0/1 values"),
    ('enabled     0   0   0   1   0   0   0   0', 'enabled     0   0   0   1   0   0   0', "is not eight 0/1"),
    ('priority    0   1   2   3   4   5   6   7', 'priority    0   1   2   3', "priority row"),
])
def test_mlnx_qos_fails_closed(old, new, error):
    text = fixture('mlnx_qos_i_dscp_pfc3_buffers_mlx5_ens14f0_magnate3.txt')
    assert old in text
    with pytest.raises(ParseError, match=error):
        parse_mlnx_qos(text.replace(old, new, 1))


@given(st.integers(min_value=0, max_value=4000), st.text(max_size=20))
def test_mlnx_qos_mutation_parses_or_fails_cleanly(at, junk):
    text = fixture('mlnx_qos_i_dscp_pfc3_buffers_mlx5_ens14f0_magnate3.txt')
    mutated = text[:at] + junk + text[at + len(junk):]
    try:
        q = parse_mlnx_qos(mutated)
    except ParseError:
        return
    assert q['trust'] in ('pcp', 'dscp') and len(q['pfc']) == 8 and set(q['pfc']) <= {0, 1}
