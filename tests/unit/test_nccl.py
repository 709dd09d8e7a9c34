"""nccl-tests parser and the nccl_bandwidth module, over every recorded all_reduce_perf output."""

import pytest

import nccl_bandwidth
from ansible.module_utils.gpu_parsers import ParseError
from ansible.module_utils.nccl_parsers import bandwidth_findings, parse_nccl_tests
from helpers import fixture, run_module

GB300 = 'nccl_allreduce_4xGB300_singlenode_newformat_truncated_oci.txt'
RTX4090 = 'nccl_allreduce_8xRTX4090_pcie_noP2P_b8_e128M_g8_full.txt'
GB200_20 = 'nccl_allreduce_gb200_20racks_partial_coreweave.txt'
NVL72 = 'nccl_allreduce_gb200_nvl72_singlerack_partial_coreweave.txt'
H100_64 = 'nccl_allreduce_h100_64gpu_sharp_partial_coreweave.txt'

# fixture -> (avg busbw, NCCL version, rows, devices, first device name, layout, truncated)
EXPECTED = {
    GB300: (446.673, '2.28.7', 2, 4, 'NVIDIA GB300', 'framed', True),
    RTX4090: (4.85265, None, 25, 8, 'NVIDIA GeForce RTX 4090', 'classic', False),
    GB200_20: (297.808, None, 6, 1, 'NVIDIA GB200', 'classic', False),
    NVL72: (745.53, None, 5, 1, 'NVIDIA Graphics Device', 'classic', False),
    H100_64: (373.187, None, 5, 0, None, 'classic', True),
}


@pytest.mark.parametrize('name', sorted(EXPECTED))
def test_every_recorded_run_parses(name):
    avg, version, rows, devices, first, layout, truncated = EXPECTED[name]
    parsed = parse_nccl_tests(fixture(name))
    assert parsed['avg_busbw_gbps'] == avg
    assert parsed['nccl_version'] == version
    assert len(parsed['results']) == rows
    assert len(parsed['devices']) == devices
    assert (parsed['devices'][0]['name'] if devices else None) == first
    assert parsed['layout'] == layout and parsed['truncated'] is truncated
    assert parsed['out_of_bounds'] == 0
    assert all(r['wrong_oop'] == 0 and r['wrong_ip'] == 0 for r in parsed['results'])


def test_row_values_and_new_layout_details():
    parsed = parse_nccl_tests(fixture(GB300))
    assert parsed['test'] == 'all_reduce_perf' and parsed['cuda_version'] == '13.0'
    assert parsed['devices'][0]['bus_id'] == '0008:06:00' and parsed['devices'][3]['device'] == 3
    assert parsed['header']['n_gpus'] == 1 and parsed['header']['max_bytes'] == 17179869184
    assert parsed['header']['iters'] == 50 and parsed['header']['step'] == '2'
    assert parsed['results'][1] == {
        'size_bytes': 17179869184, 'count': 4294967296, 'type': 'float', 'redop': 'sum', 'root': None,
        'time_us_oop': 37610.0, 'algbw_oop': 456.79, 'busbw_oop': 685.19, 'wrong_oop': 0,
        'time_us_ip': 37605.0, 'algbw_ip': 456.85, 'busbw_ip': 685.27, 'wrong_ip': 0}
    r4090 = parse_nccl_tests(fixture(RTX4090))
    assert r4090['results'][0]['size_bytes'] == 8 and r4090['results'][-1]['busbw_ip'] == 14.47
    assert r4090['header']['n_gpus'] == 8


def test_gate_names_measured_required_and_the_weakest_size():
    parsed = parse_nccl_tests(fixture(H100_64))
    assert bandwidth_findings(parsed, 350)['ok']
    gate = bandwidth_findings(parsed, 440)
    assert not gate['ok']
    assert gate['failures'] == ['average bus bandwidth 373.19 GB/s is below the required 440.00 GB/s; the weakest '
                                'size was 536870912 B at 356.60 GB/s (92% of the best, 386.56 GB/s at 8589934592 B)']
    full = bandwidth_findings(parse_nccl_tests(fixture(RTX4090)))
    assert full['weakest']['size_bytes'] == 2097152 and full['weakest']['best_size_bytes'] == 33554432


def test_wrong_results_and_out_of_bounds_fail():
    text = fixture(GB200_20).replace('150.16      0', '150.16      3').replace(
        'Out of bounds values : 0 OK', 'Out of bounds values : 7 FAILED')
    gate = bandwidth_findings(parse_nccl_tests(text))
    assert gate['failures'] == ['1 message size(s) returned wrong results (first at 536870912 B: 0 out-of-place, '
                                '3 in-place)', '7 out-of-bounds values']


@pytest.mark.parametrize('mutate,message', [
    (lambda t: '', 'empty'),
    (lambda t: t.split('# Out of bounds')[0], "without the '# Avg bus bandwidth' line"),
    (lambda t: '\n'.join(t.splitlines()[:4]), 'no result rows'),
    (lambda t: t.replace('  134217728     float     sum', '  134217728'), 'has 12 or 13 fields'),
    (lambda t: t.replace('7108.4', '7108,4'), 'is not a number'),
    (lambda t: t + '\nnode1: Test NCCL failure common.cu:1005 \'unhandled system error\'\n',
     'reported a failure: Test NCCL failure'),
])
def test_malformed_or_truncated_output_is_a_clear_error(mutate, message):
    with pytest.raises(ParseError, match=message):
        parse_nccl_tests(mutate(fixture(GB200_20)))


def test_framed_run_without_conclusion_is_cut_off():
    text = fixture(GB300).replace('# Collective test concluded: all_reduce_perf', '')
    with pytest.raises(ParseError, match='no .Collective test concluded'):
        parse_nccl_tests(text)


BINS = {'all_reduce_perf': '/usr/bin/all_reduce_perf'}


def _argv_is_allreduce(argv):
    return argv[0].endswith('all_reduce_perf') or 'mpirun' in argv[0]


def test_module_passes_and_returns_the_contract():
    res, failed, runner = run_module(nccl_bandwidth.main, {'gpus': 4, 'min_busbw_gbps': 440},
                                     {_argv_is_allreduce: (0, fixture(GB300), '')}, bins=BINS)
    assert not failed and not res['changed']
    assert runner.calls == [['/usr/bin/all_reduce_perf', '-b', '1G', '-e', '16G', '-f', '2', '-n', '20', '-w', '5',
                             '-c', '1', '-g', '4']]
    assert res['avg_busbw_gbps'] == 446.673 and res['nccl_version'] == '2.28.7'
    assert res['devices'] == ['NVIDIA GB300'] * 4 and res['out_of_bounds'] == 0
    assert res['results'][0]['size_bytes'] == 8589934592 and res['failures'] == []
    assert res['verdict'] == 'ok' and [(c['name'], c['measured'], c['expected']) for c in res['checks']] == [
        ('busbw_gbps', 446.673, 440.0), ('exit', 0, 0), ('wrong_results', 0, 0), ('out_of_bounds', 0, 0)]


def test_module_fails_closed_on_a_missing_out_of_bounds_line_and_a_non_zero_exit():
    text = '\n'.join(line for line in fixture(GB300).splitlines() if 'Out of bounds' not in line) + '\n'
    res, failed, _ = run_module(nccl_bandwidth.main, {}, {_argv_is_allreduce: (134, text, '')}, bins=BINS)
    assert failed and res['verdict'] == 'fail'
    assert [(c['name'], c['status']) for c in res['checks']] == [
        ('busbw_gbps', 'ok'), ('exit', 'fail'), ('wrong_results', 'ok'), ('out_of_bounds', 'fail')]
    assert res['msg'] == ("NCCL all-reduce gate failed: all_reduce_perf exited 134; "
                          "all_reduce_perf printed no '# Out of bounds values' line")


def test_module_fails_below_threshold_with_measured_and_required():
    res, failed, _ = run_module(nccl_bandwidth.main, {'min_busbw_gbps': 480, 'path': '/opt/nccl-tests/all_reduce_perf',
                                                      'launcher': ['mpirun', '-np', '16']},
                                {_argv_is_allreduce: (0, fixture(GB300), '')}, bins={})
    assert failed
    assert res['cmd'][:4] == ['mpirun', '-np', '16', '/opt/nccl-tests/all_reduce_perf']
    assert 'average bus bandwidth 446.67 GB/s is below the required 480.00 GB/s' in res['msg']


def test_module_parse_failure_and_missing_binary_and_check_mode():
    res, failed, _ = run_module(nccl_bandwidth.main, {}, {_argv_is_allreduce: (1, '# nThread 1 nGpus 8\n', 'boom')},
                                bins=BINS)
    assert failed and 'cannot use the all_reduce_perf output (rc=1)' in res['msg'] and 'stderr: boom' in res['msg']
    res, failed, _ = run_module(nccl_bandwidth.main, {}, {}, bins={})
    assert failed and 'not on PATH' in res['msg']
    res, failed, runner = run_module(nccl_bandwidth.main, {}, {}, bins=BINS, check_mode=True)
    assert not failed and res['skipped_in_check_mode'] and runner.calls == []
