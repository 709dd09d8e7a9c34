# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure parser for nccl-tests output (all_reduce_perf and its siblings) and the bandwidth gate.

Both layouts nccl-tests prints are read: the classic one (header, device list, table, summary) and the
newer one framed by "# Collective test starting: <test>" / "# Collective test concluded: <test>", whose
device lines carry a PCI domain ("[0008:06:00]") and which may elide rows ("# Truncated ...").
"""

from __future__ import absolute_import, division, print_function

import re

from ansible.module_utils.gpu_parsers import ParseError, utf8_input

__metaclass__ = type

_HEADER = re.compile(r'^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)'
                     r'(?:\s+step:\s*(\S+)\((factor|bytes)\))?')
_ITERS = re.compile(r'\b(warmup iters|iters|agg iters|validation|graph):\s*(\d+)')
_DEVICE = re.compile(r'^#\s*Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+'
                     r'\[([^\]]*)\]\s+(.*?)\s*$')
_VERSION = re.compile(r'^#?\s*NCCL version\s+(\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?')
_OOB = re.compile(r'^#\s*Out of bounds values\s*:\s*(\d+)\s*(\S*)')
_AVG = re.compile(r'^#\s*Avg bus bandwidth\s*:\s*([0-9.]+(?:[eE][-+]?\d+)?)')
_STARTING = re.compile(r'^#\s*Collective test starting:\s*(\S+)')
_CONCLUDED = re.compile(r'^#\s*Collective test concluded:\s*(\S+)')
_FAILURE = re.compile(r'(Test NCCL failure|NCCL failure|Test CUDA failure|NCCL WARN|Test failure)\b.*')
_NUMBER = re.compile(r'^-?[0-9.]+(?:[eE][-+]?\d+)?$')


def _num(value, what):
    if not _NUMBER.match(value):
        raise ParseError('%s: %r is not a number' % (what, value))
    return float(value)


def _wrong(value, what):
    """#wrong is a count, 'N/A' when validation is off (-c 0); very old builds print an error float."""
    if value == 'N/A':
        return None
    number = _num(value, what)
    return int(number) if number == int(number) else number


def _row(fields, lineno):
    """One table row: size count type redop [root] time algbw busbw #wrong time algbw busbw #wrong."""
    if len(fields) == 13:
        size, count, dtype, redop, root = fields[:5]
        rest = fields[5:]
    elif len(fields) == 12:
        size, count, dtype, redop = fields[:4]
        root = None
        rest = fields[4:]
    else:
        raise ParseError('line %d: a result row has 12 or 13 fields, this one has %d: %r'
                         % (lineno, len(fields), ' '.join(fields)))
    what = 'line %d' % lineno
    if not size.isdigit() or not count.isdigit():
        raise ParseError('%s: size and count must be integers, found %r and %r' % (what, size, count))
    return {
        'size_bytes': int(size), 'count': int(count), 'type': dtype, 'redop': redop,
        'root': int(root) if root not in (None, '-1') and root.lstrip('-').isdigit() else None,
        'time_us_oop': _num(rest[0], what + ' out-of-place time'),
        'algbw_oop': _num(rest[1], what + ' out-of-place algbw'),
        'busbw_oop': _num(rest[2], what + ' out-of-place busbw'),
        'wrong_oop': _wrong(rest[3], what + ' out-of-place #wrong'),
        'time_us_ip': _num(rest[4], what + ' in-place time'),
        'algbw_ip': _num(rest[5], what + ' in-place algbw'),
        'busbw_ip': _num(rest[6], what + ' in-place busbw'),
        'wrong_ip': _wrong(rest[7], what + ' in-place #wrong'),
    }


@utf8_input('all_reduce_perf')
def parse_nccl_tests(text):
    """Parse nccl-tests output. Returns a dict:

    test ('all_reduce_perf' when the new layout names it, else None), layout ('classic' or 'framed'),
    header ({n_threads, n_gpus, min_bytes, max_bytes, step, step_kind, iters...} or {}), devices
    ([{rank, group, pid, host, device, bus_id, name}]), nccl_version, cuda_version, results (one dict per
    size), out_of_bounds (int), avg_busbw_gbps (float), truncated (the author elided rows).

    Raises ParseError when the output has no result rows, a malformed row, or ends before the
    '# Avg bus bandwidth' line (a run that crashed or was cut off).
    """
    if not isinstance(text, str) or not text.strip():
        raise ParseError('nccl-tests output is empty')
    out = {'test': None, 'layout': 'classic', 'header': {}, 'devices': [], 'nccl_version': None,
           'cuda_version': None, 'results': [], 'out_of_bounds': None, 'avg_busbw_gbps': None,
           'truncated': False, 'concluded': None}
    failures = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        m = _STARTING.match(line)
        if m:
            out['test'], out['layout'] = m.group(1), 'framed'
            continue
        m = _CONCLUDED.match(line)
        if m:
            out['concluded'] = m.group(1)
            continue
        m = _HEADER.match(line)
        if m:
            out['header'] = {'n_threads': int(m.group(1)), 'n_gpus': int(m.group(2)),
                             'min_bytes': int(m.group(3)), 'max_bytes': int(m.group(4)),
                             'step': m.group(5), 'step_kind': m.group(6)}
            for key, value in _ITERS.findall(line):
                out['header'][key.replace(' ', '_')] = int(value)
            continue
        m = _DEVICE.match(line)
        if m:
            out['devices'].append({'rank': int(m.group(1)), 'group': int(m.group(2)), 'pid': int(m.group(3)),
                                   'host': m.group(4), 'device': int(m.group(5)), 'bus_id': m.group(6),
                                   'name': m.group(7)})
            continue
        m = _VERSION.match(line)
        if m:
            out['nccl_version'], out['cuda_version'] = m.group(1), m.group(2)
            continue
        m = _OOB.match(line)
        if m:
            out['out_of_bounds'] = int(m.group(1))
            continue
        m = _AVG.match(line)
        if m:
            out['avg_busbw_gbps'] = float(m.group(1))
            continue
        if re.match(r'^#\s*Truncated', line) or line.startswith('...'):
            out['truncated'] = True
            continue
        m = _FAILURE.search(line)
        if m:
            failures.append(m.group(0).strip())
            continue
        if line.startswith('#'):
            continue
        fields = line.split()
        if fields[0].isdigit():
            out['results'].append(_row(fields, lineno))
        # Anything else (NCCL INFO lines, hostnames printed by mpirun) is not ours to judge.
    if failures:
        raise ParseError('nccl-tests reported a failure: %s' % failures[0])
    if not out['results']:
        raise ParseError('nccl-tests output has no result rows (expected lines of size, count, type, ...)')
    if out['avg_busbw_gbps'] is None:
        raise ParseError('nccl-tests output ends after %d result rows (last size %d B) without the '
                         "'# Avg bus bandwidth' line: the run crashed or the output was cut off"
                         % (len(out['results']), out['results'][-1]['size_bytes']))
    if out['layout'] == 'framed' and out['concluded'] is None:
        raise ParseError("nccl-tests output has 'Collective test starting' but no 'Collective test concluded'")
    return out


def _busbw(row):
    return max(row['busbw_oop'], row['busbw_ip'])


def bandwidth_findings(parsed, min_busbw_gbps=None, metric='avg'):
    """Gate a parsed run: non-zero #wrong, out-of-bounds values, bus bandwidth under the minimum.

    metric 'avg' compares the run's '# Avg bus bandwidth'; 'largest' compares the bus bandwidth (the better
    of out-of-place and in-place) of the largest message size, which is what single-size health checks
    (aznhc: -b 16G -e 16G) measure.
    Returns {'ok', 'failures': [str], 'wrong': [{size_bytes, wrong_oop, wrong_ip}], 'weakest': {...},
    'measured_busbw_gbps', 'metric', 'below' (the failure text when under the minimum, else None)}, where
    weakest is the size whose bus bandwidth was lowest relative to the best size's, among the sizes of at
    least 1/64 of the largest (small messages are latency-bound by design, so they say nothing of links).
    """
    failures = []
    wrong = [{'size_bytes': r['size_bytes'], 'wrong_oop': r['wrong_oop'], 'wrong_ip': r['wrong_ip']}
             for r in parsed['results'] if (r['wrong_oop'] or 0) != 0 or (r['wrong_ip'] or 0) != 0]
    if wrong:
        failures.append('%d message size(s) returned wrong results (first at %d B: %s out-of-place, %s in-place)'
                        % (len(wrong), wrong[0]['size_bytes'], wrong[0]['wrong_oop'], wrong[0]['wrong_ip']))
    if parsed.get('out_of_bounds'):
        failures.append('%d out-of-bounds values' % parsed['out_of_bounds'])
    rows = parsed['results']
    best = max(rows, key=_busbw)
    largest = max(r['size_bytes'] for r in rows)
    large = [r for r in rows if r['size_bytes'] * 64 >= largest]
    low = min(large, key=_busbw)
    ratio = _busbw(low) / _busbw(best) if _busbw(best) else 0.0
    weakest = {'size_bytes': low['size_bytes'], 'busbw_gbps': _busbw(low), 'best_size_bytes': best['size_bytes'],
               'best_busbw_gbps': _busbw(best), 'ratio': round(ratio, 3)}
    if metric == 'avg':
        measured, what = parsed['avg_busbw_gbps'], 'average bus bandwidth'
    elif metric == 'largest':
        top = max(rows, key=lambda r: r['size_bytes'])
        measured, what = _busbw(top), 'bus bandwidth at the largest size (%d B)' % top['size_bytes']
    else:
        raise ValueError("metric must be 'avg' or 'largest', got %r" % (metric,))
    below = None
    if min_busbw_gbps is not None and measured < float(min_busbw_gbps):
        below = ('%s %.2f GB/s is below the required %.2f GB/s; the weakest size was '
                 '%d B at %.2f GB/s (%d%% of the best, %.2f GB/s at %d B)'
                 % (what, measured, float(min_busbw_gbps), low['size_bytes'], _busbw(low),
                    round(ratio * 100), _busbw(best), best['size_bytes']))
        failures.append(below)
    return {'ok': not failures, 'failures': failures, 'wrong': wrong, 'weakest': weakest,
            'measured_busbw_gbps': measured, 'metric': metric, 'below': below}
