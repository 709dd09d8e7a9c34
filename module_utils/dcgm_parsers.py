# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure parsers for `dcgmi diag` results: the JSON of `-j` and the boxed text table, into one shape.

    {'version', 'driver', 'gpu_device_ids',
     'tests': [{'category', 'name', 'status', 'gpus': {gpu id: status}, 'messages': [str]}]}

status is one of Pass, Fail, Warn, Skip. A test without per-GPU results ("Pass" in the Deployment
category) has gpus == {}; "Skip - All" has gpus == {'all': 'Skip'}.
"""

from __future__ import absolute_import, division, print_function

import json
import re

from ansible.module_utils.check_result import check
from ansible.module_utils.gpu_parsers import ParseError, utf8_input

__metaclass__ = type

STATUSES = ('Pass', 'Fail', 'Warn', 'Skip')
_STATUS_WORDS = {'pass': 'Pass', 'fail': 'Fail', 'warn': 'Warn', 'warning': 'Warn', 'skip': 'Skip',
                 'skipped': 'Skip', 'not run': 'Skip'}
_MESSAGE_KEYS = ('Error', 'Warning', 'Info')
_METADATA = {'DCGM Version': 'version', 'Driver Version Detected': 'driver',
             'GPU Device IDs Detected': 'gpu_device_ids'}

# (cause, test name pattern, message pattern): the first match names a failed or warned test's cause.
CAUSES = (
    ('fabric_manager_not_running', None, re.compile(r'fabric ?manager|nvidia-fabricmanager|NVSwitch', re.I)),
    ('persistence_mode_off', re.compile(r'^Persistence Mode$', re.I), re.compile(r'persistence mode', re.I)),
    ('xid_errors', None, re.compile(r'\bXID\b', re.I)),
    ('ecc_errors', None, re.compile(r'\b(DBE|SBE|ECC)\b')),
    ('pending_page_retirement_or_row_remap', re.compile(r'Page Retirement|Row Remap', re.I),
     re.compile(r'retire|row remap', re.I)),
    ('throttling', None, re.compile(r'throttl|clocks event', re.I)),
    ('processes_using_gpu', re.compile(r'^Graphics Processes$', re.I), None),
    ('inforom_corrupt', re.compile(r'^Inforom$', re.I), re.compile(r'inforom', re.I)),
    ('conflicting_environment', re.compile(r'^Environment Variables$', re.I), None),
    ('denylisted_driver', re.compile(r'^(Denylist|Blacklist)$', re.I), None),
    ('library_missing', re.compile(r'Library|Libraries', re.I), None),
    ('permissions', re.compile(r'Permissions', re.I), None),
    ('pcie', re.compile(r'^PCIe$', re.I), re.compile(r'\bPCIe\b')),
    ('nvlink', re.compile(r'NVLink|nvbandwidth', re.I), re.compile(r'NVLink', re.I)),
    ('memory_errors', re.compile(r'Memory|Memtest', re.I), None),
    ('power_or_thermal', re.compile(r'Power|Pulse|Thermal', re.I), re.compile(r'temperature|power', re.I)),
    ('compute_stress', re.compile(r'Stress|Diagnostic|Software', re.I), None),
)


def _status(word, what):
    status = _STATUS_WORDS.get(str(word).strip().lower())
    if status is None:
        raise ParseError('%s: unknown result %r (expected Pass, Fail, Warn or Skip)' % (what, word))
    return status


def _result_cell(text, what):
    """'Pass', 'Skip - All', 'Fail - GPU: 0, 3', 'Pass - GPUs: 0, 1' -> (status, {gpu: status})."""
    m = re.match(r'^(Pass|Fail|Warn|Warning|Skip|Skipped)\s*(?:-\s*(.*))?$', text.strip(), re.I)
    if not m:
        raise ParseError('%s: cannot read the result %r (expected Pass/Fail/Warn/Skip[ - All | - GPU(s): ids])'
                         % (what, text.strip()))
    status = _status(m.group(1), what)
    scope = (m.group(2) or '').strip()
    if not scope:
        return status, {}
    if scope.lower() == 'all':
        return status, {'all': status}
    ids = re.match(r'^GPUs?:?\s*([\d,\s]+)$', scope, re.I)
    if not ids:
        raise ParseError('%s: cannot read the GPU list %r' % (what, scope))
    return status, dict((g.strip(), status) for g in ids.group(1).split(',') if g.strip())


def parse_dcgmi_diag_text(text):
    """Parse the boxed table `dcgmi diag -r N` prints. Wrapped message cells are re-joined exactly."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError('dcgmi diag output is empty')
    out = {'version': None, 'driver': None, 'gpu_device_ids': [], 'tests': []}
    category = None
    open_message = None  # [test, key, chunks, width] of a message cell that may wrap onto the next lines
    seen_table = False
    last = None  # (line number, kind) of the last table line: the table must end with its closing border
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip('\n')
        section = re.match(r'^[|+]-+\s+(\w[\w ]*?)\s+-+\+', line)
        if section:
            category, open_message = section.group(1), None
            last = (lineno, 'section')
            continue
        if not line.startswith('|'):
            if line.startswith('+'):
                seen_table = True
                last = (lineno, 'border')
            continue
        last = (lineno, 'row')
        cells = line.split('|')
        if len(cells) < 4:
            raise ParseError('line %d: expected "| name | result |", found %r' % (lineno, line))
        name, cell = cells[1].strip(), '|'.join(cells[2:-1])
        if name == 'Diagnostic' and cell.strip() == 'Result':
            seen_table = True
            continue
        if not name:
            if open_message is None:
                raise ParseError('line %d: a continuation line with no message before it: %r' % (lineno, line))
            open_message[2].append(cell[1:1 + open_message[3]])
            continue
        if open_message is not None:
            open_message[0]['messages'].append(''.join(open_message[2]).rstrip())
            open_message = None
        if category == 'Metadata' or name in _METADATA:
            key = _METADATA.get(name)
            if key == 'gpu_device_ids':
                out[key] = [v.strip() for v in cell.split(',') if v.strip()]
            elif key:
                out[key] = cell.strip()
            continue
        if name in _MESSAGE_KEYS:
            if not out['tests']:
                raise ParseError('line %d: %s text before any test' % (lineno, name))
            open_message = [out['tests'][-1], name, [cell[1:len(cell) - 2]], len(cell) - 3]
            continue
        status, gpus = _result_cell(cell, 'line %d (%s)' % (lineno, name))
        out['tests'].append({'category': category or '', 'name': name, 'status': status, 'gpus': gpus,
                             'messages': []})
    if open_message is not None:
        open_message[0]['messages'].append(''.join(open_message[2]).rstrip())
    if not seen_table or not out['tests']:
        raise ParseError('dcgmi diag output has no result table (expected "| Diagnostic | Result |" and test rows)')
    if last[1] != 'border':
        raise ParseError('dcgmi diag table ends at line %d without its closing +---+ border: the output was cut '
                         'off after %d tests (last: %s)' % (last[0], len(out['tests']), out['tests'][-1]['name']))
    return out


def _messages(value):
    """A JSON warnings/info field: a string, a list of strings, or a list of {'warning'|'message': ...}."""
    if value in (None, '', []):
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = [value]
    msgs = []
    for item in value:
        if isinstance(item, dict):
            msgs.append(str(item.get('warning') or item.get('message') or item.get('info') or json.dumps(item)))
        else:
            msgs.append(str(item))
    return msgs


def parse_dcgmi_diag_json(text):
    """Parse `dcgmi diag -j`: {"DCGM GPU Diagnostic" (or "DCGM Diagnostic"): {"test_categories": [...]}}."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError('dcgmi diag -j output is empty')
    start = text.find('{')
    try:
        doc = json.loads(text[start:]) if start >= 0 else None
    except ValueError as e:
        raise ParseError('dcgmi diag -j output is not valid JSON (%s); was it cut off?' % e)
    if not isinstance(doc, dict):
        raise ParseError('dcgmi diag -j output holds no JSON object')
    body = doc.get('DCGM GPU Diagnostic', doc.get('DCGM Diagnostic'))
    if not isinstance(body, dict) or not isinstance(body.get('test_categories'), list):
        raise ParseError('dcgmi diag -j output has no "DCGM GPU Diagnostic".test_categories list (keys: %s)'
                         % ', '.join(sorted(doc)))
    meta = doc.get('metadata') or body.get('metadata') or {}
    out = {'version': meta.get('version') or body.get('version') or doc.get('version'),
           'driver': meta.get('Driver Version Detected') or body.get('Driver Version Detected'),
           'gpu_device_ids': [], 'tests': []}
    ids = meta.get('GPU Device IDs') or body.get('GPU Device IDs') or []
    out['gpu_device_ids'] = [str(i) for i in (ids.split(',') if isinstance(ids, str) else ids)]
    for c, cat in enumerate(body['test_categories']):
        if not isinstance(cat, dict) or not isinstance(cat.get('tests'), list):
            raise ParseError('test_categories[%d] has no tests list' % c)
        for t, test in enumerate(cat['tests']):
            what = '%s test %d' % (cat.get('category', 'category %d' % c), t)
            if not isinstance(test, dict) or not isinstance(test.get('name'), str) or \
                    not isinstance(test.get('results'), list):
                raise ParseError('%s has no name or results list' % what)
            entry = {'category': cat.get('category', ''), 'name': test['name'], 'status': None, 'gpus': {},
                     'messages': []}
            statuses = []
            for res in test['results']:
                if not isinstance(res, dict):
                    raise ParseError('%s (%s): a result is %r, not an object' % (what, test['name'], res))
                status = _status(res.get('status'), '%s (%s)' % (what, test['name']))
                statuses.append(status)
                gpu = res.get('gpu_ids', res.get('gpu_id', res.get('entity_id')))
                if gpu not in (None, ''):
                    for g in str(gpu).split(','):
                        entry['gpus'][g.strip()] = status
                entry['messages'] += _messages(res.get('warnings')) + _messages(res.get('info'))
            if not statuses:
                raise ParseError('%s (%s) has no results' % (what, test['name']))
            entry['status'] = next((s for s in ('Fail', 'Warn', 'Pass', 'Skip') if s in statuses), 'Skip')
            out['tests'].append(entry)
    if not out['tests']:
        raise ParseError('dcgmi diag -j output lists no tests')
    return out


@utf8_input('dcgmi diag')
def parse_dcgmi_diag(text):
    """JSON when the output is JSON, else the text table."""
    if isinstance(text, str) and text.lstrip().startswith('{'):
        return parse_dcgmi_diag_json(text)
    return parse_dcgmi_diag_text(text)


def _gpus_named(message):
    return sorted(set(re.findall(r'\bGPU\s*(\d+)', message)), key=int)


def diag_causes(parsed):
    """Named causes of every failed or warned test: [{cause, test, status, gpus, message}]."""
    causes = []
    for test in parsed['tests']:
        if test['status'] not in ('Fail', 'Warn'):
            continue
        text = ' '.join(test['messages'])
        cause = 'unclassified'
        for name, test_pattern, message_pattern in CAUSES:
            if (test_pattern is not None and test_pattern.search(test['name'])) or \
                    (message_pattern is not None and message_pattern.search(text)):
                cause = name
                break
        gpus = sorted([g for g, s in test['gpus'].items() if s == test['status'] and g != 'all'], key=int) \
            or _gpus_named(text)
        causes.append({'cause': cause, 'test': test['name'], 'status': test['status'], 'gpus': gpus,
                       'message': text})
    return causes


def per_gpu(parsed):
    """{gpu id: {test name: status}} for the tests that reported per GPU."""
    gpus = {}
    for test in parsed['tests']:
        for gpu, status in test['gpus'].items():
            if gpu != 'all':
                gpus.setdefault(gpu, {})[test['name']] = status
    return gpus


def summarize(parsed):
    counts = dict((s.lower(), 0) for s in STATUSES)
    for test in parsed['tests']:
        counts[test['status'].lower()] += 1
    return counts


def diag_checks(parsed, rc, fail_on=('Fail',), allowed_skips=(), required_tests=()):
    """The run in the one result format: one check per test (name the test, subject its category), a
    required test that did not run, nothing run at all, and a non-zero exit no failed test explains.
    A skipped test is a fail when required_tests names it, ok when allowed_skips does, else a warn (reported
    with its reason, not gating): DCGM skips tests a GPU does not support."""
    causes = dict((c['test'], c) for c in diag_causes(parsed))
    checks = []
    for test in parsed['tests']:
        st = test['status']
        name, subject = test['name'], test['category'] or 'diag'
        if st == 'Pass':
            checks.append(check(name, subject, 'ok', st, 'Pass', '%s pass' % name))
        elif st == 'Skip':
            if name in required_tests:
                status, why = 'fail', ': a required test that did not run proves nothing'
            elif name in allowed_skips:
                status, why = 'ok', ' (allowed_skips names it)'
            else:
                status, why = 'warn', ': not run, so not proven (name it in required_tests or allowed_skips)'
            checks.append(check(name, subject, status, st, 'Pass', '%s skipped%s' % (name, why)))
        else:
            c = causes[name]
            checks.append(check(name, subject, 'fail' if st in fail_on else 'warn', st, 'Pass', '%s %s (%s%s)' % (
                name, st.lower(), c['cause'], ', GPU ' + ','.join(c['gpus']) if c['gpus'] else '')))
    ran = [t['name'] for t in parsed['tests'] if t['status'] != 'Skip']
    listed = set(t['name'] for t in parsed['tests'])
    for name in required_tests:
        if name not in listed:
            checks.append(check(name, 'required', 'fail', 'absent', 'Pass',
                                '%s is required but dcgmi diag did not list it' % name))
    if not ran:
        checks.append(check('ran', 'diag', 'fail', 0, 'at least one test run',
                             'no test ran: dcgmi diag skipped all %d' % len(parsed['tests'])))
    if rc != 0 and not any(t['status'] in ('Fail', 'Warn') for t in parsed['tests']):
        checks.append(check('exit', 'dcgmi', 'fail', rc, 0, 'dcgmi diag exited %d but no test failed' % rc))
    return checks
