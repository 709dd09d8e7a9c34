"""dcgmi diag parsers (text table and -j JSON) and the dcgm_diag module, over the recorded outputs."""

import json
import re

import pytest

import dcgm_diag
from ansible.module_utils.dcgm_parsers import diag_causes, parse_dcgmi_diag, per_gpu, summarize
from ansible.module_utils.gpu_parsers import ParseError
from helpers import fixture, run_module

R1 = 'dcgmi_diag_r1_8xH200_azure_ndv5_persistence_fail.txt'
R4 = 'dcgmi_diag_r4_rtx2060_persistence_fail_memtest.txt'
R1_JSON = 'derived/dcgmi_diag_r1_8xH200.json'
BINS = {'dcgmi': '/usr/bin/dcgmi'}


def test_level1_table_with_metadata_and_wrapped_error():
    parsed = parse_dcgmi_diag(fixture(R1))
    assert parsed['version'] == '3.1.8' and parsed['driver'] == '550.127.08'
    assert parsed['gpu_device_ids'] == ['2335'] * 8
    assert [t['name'] for t in parsed['tests']] == [
        'Denylist', 'NVML Library', 'CUDA Main Library', 'Permissions and OS Blocks', 'Persistence Mode',
        'Environment Variables', 'Page Retirement/Row Remap', 'Graphics Processes', 'Inforom']
    pm = parsed['tests'][4]
    assert pm['status'] == 'Fail' and pm['category'] == 'Deployment'
    # The wrapped cell is re-joined exactly: words split across lines come back whole.
    assert pm['messages'][0].startswith('Persistence mode for GPU 0 is currently disabled. The DCGM diagnostic '
                                        'requires peristence mode to be enabled. Enable persistence mode by running '
                                        '"nvidia-smi -i <gpuId> -pm 1 " as root., Persistence mode for GPU 1 is')
    assert pm['messages'][0].endswith('Persistence mode for GPU 5 is currently disabled. The DCGM diagnostic '
                                      'requires peristence mod')
    assert summarize(parsed) == {'pass': 8, 'fail': 1, 'warn': 0, 'skip': 0}
    assert diag_causes(parsed) == [{'cause': 'persistence_mode_off', 'test': 'Persistence Mode', 'status': 'Fail',
                                    'gpus': ['0', '1', '2', '3', '4', '5'], 'message': pm['messages'][0]}]


def test_level4_table_categories_and_all_scope():
    parsed = parse_dcgmi_diag(fixture(R4))
    assert parsed['version'] is None
    by_name = {t['name']: t for t in parsed['tests']}
    assert by_name['PCIe'] == {'category': 'Integration', 'name': 'PCIe', 'status': 'Skip', 'gpus': {'all': 'Skip'},
                               'messages': []}
    assert by_name['Memtest']['status'] == 'Pass' and by_name['Memtest']['category'] == 'Stress'
    assert by_name['Pulse Test']['category'] == 'Hardware'
    assert summarize(parsed) == {'pass': 9, 'fail': 1, 'warn': 0, 'skip': 6}
    assert [c['gpus'] for c in diag_causes(parsed)] == [['0']]


def test_json_layout_gives_the_same_results_as_the_table():
    text, table = fixture(R1_JSON), parse_dcgmi_diag(fixture(R1))
    parsed = parse_dcgmi_diag(text)
    assert [(t['name'], t['status'], t['messages']) for t in parsed['tests']] == \
        [(t['name'], t['status'], t['messages']) for t in table['tests']]
    assert parsed['version'] == '3.1.8' and parsed['gpu_device_ids'] == ['2335'] * 8


def test_json_per_gpu_results_and_named_causes():
    doc = json.loads(fixture(R1_JSON))
    doc['DCGM GPU Diagnostic']['test_categories'].append({'category': 'Integration', 'tests': [
        {'name': 'PCIe', 'results': [{'gpu_ids': '0', 'status': 'Pass'},
                                     {'gpu_ids': '3', 'status': 'Fail',
                                      'warnings': [{'warning': 'GPU 3 PCIe link is running at x8, expected x16',
                                                    'error_id': 1}]}]}]})
    doc['DCGM GPU Diagnostic']['test_categories'][0]['tests'][0]['results'][0] = {
        'status': 'Fail', 'warnings': 'The NVIDIA Fabric Manager service is not running'}
    parsed = parse_dcgmi_diag(json.dumps(doc))
    assert per_gpu(parsed) == {'0': {'PCIe': 'Pass'}, '3': {'PCIe': 'Fail'}}
    causes = {c['test']: (c['cause'], c['gpus']) for c in diag_causes(parsed)}
    assert causes == {'Denylist': ('fabric_manager_not_running', []), 'PCIe': ('pcie', ['3']),
                      'Persistence Mode': ('persistence_mode_off', ['0', '1', '2', '3', '4', '5'])}


@pytest.mark.parametrize('text,message', [
    ('', 'empty'),
    ('Error: unable to establish a connection to the specified host: localhost\n', 'no result table'),
    ('{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [{"name": "Den',
     'not valid JSON'),
    ('{"something": 1}', 'no "DCGM GPU Diagnostic".test_categories'),
    ('{"DCGM GPU Diagnostic": {"test_categories": [{"category": "D", "tests": [{"name": "X", "results": '
     '[{"status": "Maybe"}]}]}]}}', "unknown result 'Maybe'"),
])
def test_malformed_output_is_a_clear_error(text, message):
    with pytest.raises(ParseError, match=message):
        parse_dcgmi_diag(text)


def test_truncated_table_row_is_named():
    text = fixture(R4).replace('| Memtest                   | Pass - All ', '| Memtest                   | Pas - All  ')
    with pytest.raises(ParseError, match=r'line \d+ \(Memtest\): cannot read the result'):
        parse_dcgmi_diag(text)


def test_module_fails_with_named_causes_and_returns_results():
    res, failed, runner = run_module(dcgm_diag.main, {}, {('diag', '-r', '1', '-j'): (226, fixture(R1_JSON), '')},
                                     bins=BINS)
    assert failed and runner.calls == [['/usr/bin/dcgmi', 'diag', '-r', '1', '-j']]
    assert res['msg'] == 'DCGM diagnostic level 1: Persistence Mode fail (persistence_mode_off, GPU 0,1,2,3,4,5)'
    assert res['summary']['fail'] == 1 and res['dcgm_version'] == '3.1.8' and len(res['tests']) == 9


def test_module_passes_on_a_clean_run_and_reads_text_when_asked():
    clean = fixture(R4).replace('| Persistence Mode          | Fail  ', '| Persistence Mode          | Pass  ')
    res, failed, _ = run_module(dcgm_diag.main, {'level': 4, 'json': False, 'gpu_list': [0]},
                                {('diag', '-r', '4', '-i', '0'): (0, clean, '')}, bins=BINS)
    skipped = ['PCIe', 'GPU Memory', 'Pulse Test', 'Targeted Stress', 'Targeted Power', 'Memory Bandwidth']
    # The six tests dcgmi skipped proved nothing: each is a warning with its reason, not a pass.
    assert not failed and res['summary'] == {'pass': 10, 'fail': 0, 'warn': 0, 'skip': 6}
    assert res['verdict'] == 'warn'
    assert [c['name'] for c in res['checks'] if c['status'] == 'warn'] == skipped
    assert ('Pulse Test skipped: not run, so not proven (name it in required_tests or allowed_skips)'
            in [c['reason'] for c in res['checks']])
    # required, a skip fails the run naming the test
    res, failed, _ = run_module(dcgm_diag.main, {'level': 4, 'json': False, 'gpu_list': [0],
                                                 'required_tests': ['Pulse Test']},
                                {('diag', '-r', '4', '-i', '0'): (0, clean, '')}, bins=BINS)
    assert failed and res['msg'] == ('DCGM diagnostic level 4: Pulse Test skipped: a required test that did not '
                                     'run proves nothing')
    res, failed, _ = run_module(dcgm_diag.main, {'level': 4, 'json': False, 'gpu_list': [0],
                                                 'allowed_skips': skipped},
                                {('diag', '-r', '4', '-i', '0'): (0, clean, '')}, bins=BINS)
    assert not failed and res['verdict'] == 'ok' and len(res['checks']) == 16, res.get('msg')
    assert {(c['subject'], c['name'], c['status'], c['measured']) for c in res['checks']} >= {
        ('Stress', 'Memtest', 'ok', 'Pass'), ('Hardware', 'Pulse Test', 'ok', 'Skip')}


def _diag(text, rc=0, **params):
    params.setdefault('json', False)
    argv = ('diag', '-r', str(params.get('level', 1))) + (('-j',) if params['json'] else ())
    return run_module(dcgm_diag.main, params, {argv: (rc, text, '')}, bins=BINS)


def test_a_table_cut_off_before_its_border_fails_naming_the_last_test():
    lines = fixture(R4).splitlines()
    res, failed, _ = _diag('\n'.join(lines[:-1]) + '\n', level=4)
    assert failed and 'without its closing +---+ border' in res['msg'] and 'last: Memtest' in res['msg']
    res, failed, _ = _diag('\n'.join(lines[:12]) + '\n', level=4)
    assert failed and 'cut off' in res['msg']


def test_nothing_run_a_missing_required_test_and_an_unexplained_exit_fail():
    all_skip = re.sub(r'\| (Pass|Fail)( - All)?(\s*)\|', lambda m: '| Skip' + ' ' * (len(m.group(0)) - 7) + '|',
                      fixture(R4))
    res, failed, _ = _diag(all_skip, level=4, allowed_skips=[t['name'] for t in
                                                             parse_dcgmi_diag(fixture(R4))['tests']])
    assert failed and res['summary']['skip'] == 16, res['summary']
    assert [c['name'] for c in res['checks'] if c['status'] == 'fail'] == ['ran']
    res, failed, _ = _diag(fixture(R4), level=4, required_tests=['Memtest', 'EUD'],
                           allowed_skips=['PCIe', 'GPU Memory', 'Pulse Test', 'Targeted Stress', 'Targeted Power',
                                          'Memory Bandwidth'])
    assert failed and {(c['subject'], c['name']) for c in res['checks'] if c['status'] == 'fail'} == {
        ('Deployment', 'Persistence Mode'), ('required', 'EUD')}
    clean = fixture(R4).replace('| Persistence Mode          | Fail  ', '| Persistence Mode          | Pass  ')
    res, failed, _ = _diag(clean, rc=3, level=4, allowed_skips=['PCIe', 'GPU Memory', 'Pulse Test',
                                                                 'Targeted Stress', 'Targeted Power',
                                                                 'Memory Bandwidth'])
    assert failed and res['msg'] == 'DCGM diagnostic level 4: dcgmi diag exited 3 but no test failed'


def test_json_with_results_of_the_wrong_shape_fails_with_a_reason():
    doc = {'DCGM GPU Diagnostic': {'test_categories': [{'category': 'Deployment', 'tests': [
        {'name': 'Denylist', 'results': ['Pass']}]}]}}
    res, failed, _ = _diag(json.dumps(doc), json=True)
    assert failed and "a result is 'Pass', not an object" in res['msg']
    doc['DCGM GPU Diagnostic']['test_categories'][0]['tests'][0] = {'name': None, 'results': []}
    res, failed, _ = _diag(json.dumps(doc), json=True)
    assert failed and 'has no name or results list' in res['msg']


def test_module_bad_output_missing_binary_and_check_mode():
    res, failed, _ = run_module(dcgm_diag.main, {}, {('diag', '-r', '1', '-j'): (255, '', 'Error: host engine')},
                                bins=BINS)
    assert failed and 'cannot read the dcgmi diag output (rc=255): dcgmi diag output is empty' in res['msg']
    res, failed, _ = run_module(dcgm_diag.main, {}, {}, bins={})
    assert failed and 'dcgmi is not on PATH' in res['msg']
    res, failed, runner = run_module(dcgm_diag.main, {'level': 3}, {}, bins=BINS, check_mode=True)
    assert not failed and res['skipped_in_check_mode'] and runner.calls == []
