# -*- coding: utf-8 -*-
"""Every text parser, on mutations of every real recorded output it reads: it returns, or raises its
own ParseError with a message. Never another exception (a traceback in a module)."""

import glob
import os

import pytest
from ansible.module_utils.dcgm_parsers import parse_dcgmi_diag
from ansible.module_utils.gpu_parsers import (HEALTH_QUERY_FIELDS, ParseError, parse_health_query, parse_nvlink_errors,
                                              parse_nvlink_status, parse_nvsmi_q, parse_query_csv,
                                              parse_topo_matrix, parse_xid_log)
from ansible.module_utils.nccl_parsers import parse_nccl_tests
from ansible.module_utils.rdma_parsers import parse_ibdev2netdev, parse_ibstat, parse_show_gids
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from mutations import mutated_fixture

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def texts(*patterns, exclude=()):
    out = {}
    for pattern in patterns:
        for path in glob.glob(os.path.join(FIXTURES, pattern)):
            name = os.path.relpath(path, FIXTURES)
            if not any(x in name for x in exclude):
                with open(path, encoding='utf-8') as fh:
                    out[name] = fh.read()
    assert out, 'no fixture matches %s' % (patterns,)
    return out


def health_queries():
    """What `nvidia-smi --query-gpu=<HEALTH_QUERY_FIELDS> --format=csv,noheader,nounits` prints on the
    derived nodes: their recorded full query, cut to the health fields (as the lab simulator answers)."""
    out = {}
    for name, text in texts('derived/*/query_gpu.csv').items():
        rows = parse_query_csv(text)
        out[name + ':health'] = ''.join(', '.join(row[f] for f in HEALTH_QUERY_FIELDS) + '\n' for row in rows)
    return out


PARSERS = {
    'topo_matrix': (parse_topo_matrix, texts('topo_*.txt', 'derived/*/topo.txt', exclude=('p2p',))),
    'nvlink_status': (parse_nvlink_status, texts('nvlink_s_*.txt', 'nvlink_status_*.txt',
                                                 'gpud/nvidia-smi.nvlink.status.a100')),
    'nvlink_errors': (parse_nvlink_errors, texts('nvlink_e_*.txt', 'derived/*/nvlink_e.txt')),
    'health_query': (parse_health_query, health_queries()),
    'query_csv': (parse_query_csv, texts('query_gpu_csv_*.txt', 'derived/*/query_gpu.csv')),
    'nvsmi_q': (parse_nvsmi_q, texts('gpud/nvidia-smi-query.*', 'nvsmi_q_*.txt', 'derived/*/q.txt')),
    'xid_log': (parse_xid_log, texts('gpud/dmesg-with-xid-119.log', 'dmesg_*.txt')),
    'dcgmi_diag': (parse_dcgmi_diag, texts('dcgmi_diag_*.txt', 'derived/dcgmi/*', 'derived/dcgmi_diag_*.json')),
    'nccl_tests': (parse_nccl_tests, texts('nccl_*.txt')),
    'ibstat': (parse_ibstat, texts('gpud/ibstat.*')),
    'show_gids': (parse_show_gids, texts('show_gids_*.txt')),
    'ibdev2netdev': (parse_ibdev2netdev, texts('ibdev2netdev_*.txt')),
}


def _check(parser, case):
    name, kind, description, text = case
    try:
        parser(text)
    except ParseError as exc:
        assert str(exc).strip(), 'empty ParseError message'
    except Exception as exc:  # noqa: BLE001 - the property under test
        raise AssertionError('%s on %s (%s): %s: %s' % (parser.__name__, name, description,
                                                         type(exc).__name__, exc)) from exc


def _make(key):
    parser, corpus = PARSERS[key]

    @SETTINGS
    @given(case=mutated_fixture(corpus))
    def test(case):
        _check(parser, case)
    test.__name__ = 'test_%s_raises_only_parse_error' % key
    return test


for _key in PARSERS:
    globals()['test_%s_raises_only_parse_error' % _key] = _make(_key)


# Real outputs that are themselves broken: each must be refused with a ParseError.
BROKEN = {
    'query_gpu_csv_name_busid_vbios_h100_elided_mlengineering.txt',  # rows elided with "..."
    'gpud/nvidia-smi-query.535.183.01.out.0.invalid',  # gpud's own invalid case: GPU sections missing
}


@pytest.mark.parametrize('key', sorted(PARSERS))
def test_every_real_fixture_parses_or_is_refused(key):
    parser, corpus = PARSERS[key]
    for name, text in corpus.items():
        if name in BROKEN:
            with pytest.raises(ParseError):
                parser(text)
        else:
            parser(text)
