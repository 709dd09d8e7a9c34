# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure parsers for nvidia-smi and kernel-log text (text in, dicts out).

No Ansible imports: the functions are unit-tested directly against the recorded
outputs in tests/fixtures. Every parser raises ParseError (a ValueError) whose
message names the line, field or GPU that could not be parsed.
"""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type


class ParseError(ValueError):
    """Raised when tool output cannot be parsed; the message says what and where."""


ANSI_RE = re.compile(r'\x1b\[[0-9;]*[A-Za-z]')
# AnsibleModule.run_command hands bytes that are not UTF-8 over as surrogate escapes; a result holding one
# is a result ansible-core cannot read back, so parsers refuse such text first.
UNDECODABLE_RE = re.compile(u'[\udc80-\udcff]')


def check_utf8(text, what):
    """Raise ParseError naming the line when text holds bytes that were not UTF-8."""
    m = UNDECODABLE_RE.search(text) if isinstance(text, str) else None
    if m:
        raise ParseError('%s output is not UTF-8 (byte 0x%02x on line %d)'
                         % (what, ord(m.group(0)) - 0xdc00, text.count('\n', 0, m.start()) + 1))


def readable_output(text):
    """Tool output safe to return in a module result: bytes that were not UTF-8 become U+FFFD."""
    return UNDECODABLE_RE.sub(u'\ufffd', text) if isinstance(text, str) else text


def utf8_input(what):
    """Decorator: the parser's first argument must be UTF-8 text (check_utf8)."""
    def wrap(parser):
        def parse(text, *args, **kwargs):
            check_utf8(text, what)
            return parser(text, *args, **kwargs)
        parse.__name__, parse.__doc__ = parser.__name__, parser.__doc__
        return parse
    return wrap

# --------------------------------------------------------------------------
# nvidia-smi topo -m
# --------------------------------------------------------------------------

# Distance order used by nic_max_distance checks (closest first).
DISTANCE_ORDER = ['X', 'PIX', 'PXB', 'PHB', 'NODE', 'SYS']
_NV_RE = re.compile(r'^NV(\d+)$')
_AFFINITY_HEADERS = ('CPU Affinity', 'NUMA Affinity', 'GPU NUMA ID')
_HEADER_TOKEN_RE = re.compile(r'CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+')
_NIC_LEGEND_RE = re.compile(r'^(NIC\d+)\s*:\s*(\S+)$')
_GPU_COL_RE = re.compile(r'^GPU\d+$')
_AFFINITY_KEYS = {'CPU Affinity': 'cpu_affinity', 'NUMA Affinity': 'numa_affinity',
                  'GPU NUMA ID': 'gpu_numa_id'}


def strip_ansi(text):
    return ANSI_RE.sub('', text)


_KNOWN_CODES = frozenset(DISTANCE_ORDER + ['NV%d' % n for n in range(1, 65)])


def is_link_code(code):
    return code in _KNOWN_CODES or bool(_NV_RE.match(code))


def nvlink_count(code):
    """Number of bonded NVLinks in a code like NV18 (0 for PCIe codes)."""
    m = _NV_RE.match(code or '')
    return int(m.group(1)) if m else 0


def distance_rank(code):
    """Rank of a link code for distance comparisons; NV# counts as closest to X."""
    if _NV_RE.match(code or ''):
        return 0
    try:
        return DISTANCE_ORDER.index(code)
    except ValueError:
        raise ParseError('unknown topology distance code %r' % (code,))


def _split_row(line):
    # matrix cells never contain spaces (codes, "0-55,112-167", "N/A"), so spaces are padding
    if '\t' in line:
        return line.replace(' ', '').split('\t')
    return line.split()


@utf8_input('nvidia-smi topo -m')
def parse_topo_matrix(text):
    """Parse `nvidia-smi topo -m` output.

    Returns dict: gpu_count, gpus, nics, nic_columns, links, cpu_affinity,
    numa_affinity, gpu_numa_id, legend_style.
    """
    if not isinstance(text, str) or not text.strip():
        raise ParseError('topo -m output is empty')
    if '\x1b' in text:
        text = strip_ansi(text)
    lines = text.splitlines()
    # header: first non-empty line that mentions GPU0
    hidx = None
    for i, line in enumerate(lines):
        if line.strip():
            hidx = i
            break
    header_line = lines[hidx]
    header = _HEADER_TOKEN_RE.findall(header_line)
    if not header or header[0] != 'GPU0':
        raise ParseError('topo -m header line %d does not start with GPU0: %r'
                         % (hidx + 1, header_line.strip()[:80]))
    columns = []
    aff_headers = []
    for tok in header:
        if tok in _AFFINITY_HEADERS:
            aff_headers.append(tok)
        elif aff_headers:
            raise ParseError('topo -m header: device column %r after affinity columns' % tok)
        else:
            columns.append(tok)
    gpus = [c for c in columns if _GPU_COL_RE.match(c)]
    nic_columns = [c for c in columns if c not in gpus]
    rows = {}
    row_aff = {}
    legend_lines = []
    i = hidx + 1
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            break
        if line.strip().startswith('Legend'):
            break
        fields = _split_row(line)
        name = fields[0]
        if name not in columns:
            raise ParseError('topo -m line %d: row %r is not a column of the header' % (i + 1, name))
        values = fields[1:]
        if len(values) < len(columns):
            raise ParseError('topo -m row %s (line %d): expected %d link fields, found %d (truncated row?)'
                             % (name, i + 1, len(columns), len(values)))
        codes = values[:len(columns)]
        if not _KNOWN_CODES.issuperset(codes) or codes[columns.index(name)] != 'X':
            for col, code in zip(columns, codes):
                if col == name:
                    if code != 'X':
                        raise ParseError('topo -m row %s: self entry is %r, expected X' % (name, code))
                elif not is_link_code(code):
                    raise ParseError('topo -m row %s column %s: unknown link code %r' % (name, col, code))
        rows[name] = codes
        rest = values[len(columns):]
        if name in gpus:
            # nvidia-smi prints an extra empty field before "GPU NUMA ID"
            if 'GPU NUMA ID' in aff_headers and len(rest) == len(aff_headers) + 1:
                pos = aff_headers.index('GPU NUMA ID')
                if rest[pos] == '':
                    rest = rest[:pos] + rest[pos + 1:]
            if len(rest) > len(aff_headers):
                raise ParseError('topo -m row %s: %d affinity fields for %d affinity columns'
                                 % (name, len(rest), len(aff_headers)))
            aff = {}
            for k, h in enumerate(aff_headers):
                aff[_AFFINITY_KEYS[h]] = rest[k] if k < len(rest) else ''
            row_aff[name] = aff
        i += 1
    missing = [g for g in gpus if g not in rows]
    if missing:
        raise ParseError('topo -m: no matrix row for %s (truncated output?)' % ', '.join(missing))
    # legend
    nic_legend = {}
    legend_style = 'none'
    for line in lines[i:]:
        s = line.strip()
        if s.startswith('NIC'):
            m = _NIC_LEGEND_RE.match(s)
            if m:
                nic_legend[m.group(1)] = m.group(2)
        elif s.startswith('PIX') and '=' in s:
            legend_style = 'old' if 'switch' in s else 'new'
    nics = [nic_legend.get(c, c) for c in nic_columns]
    name_of = dict((c, nic_legend.get(c, c)) for c in columns)
    names = [name_of[c] for c in columns]
    links = {}
    for rname, codes in rows.items():
        row = dict(zip(names, codes))
        del row[name_of[rname]]
        links[name_of[rname]] = row
    for c in columns:  # rows nvidia-smi did not print: fill from the symmetric entries
        n = name_of[c]
        if n not in links:
            links[n] = dict((r, links[r][n]) for r in links if n in links[r])
    cpu = dict((g, row_aff.get(g, {}).get('cpu_affinity', '')) for g in gpus)
    numa = dict((g, row_aff.get(g, {}).get('numa_affinity', '')) for g in gpus)
    gnuma = dict((g, row_aff.get(g, {}).get('gpu_numa_id', '')) for g in gpus)
    return {
        'gpu_count': len(gpus),
        'gpus': gpus,
        'nics': nics,
        'nic_columns': nic_columns,
        'links': links,
        'cpu_affinity': cpu,
        'numa_affinity': numa,
        'gpu_numa_id': gnuma,
        'affinity_columns': list(aff_headers),
        'legend_style': legend_style,
    }


# --------------------------------------------------------------------------
# nvidia-smi nvlink -s / -e
# --------------------------------------------------------------------------

_GPU_HDR_RE = re.compile(r'^GPU (\d+): (.*?)(?: \(UUID: ([^)]*)\))?\s*$')
_LINK_SPEED_RE = re.compile(r'^Link (\d+): (.*)$')


def _gpu_blocks(text, what):
    if not isinstance(text, str) or not text.strip():
        raise ParseError('%s output is empty' % what)
    blocks = []
    cur = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = strip_ansi(raw).strip()
        if not line:
            continue
        m = _GPU_HDR_RE.match(line)
        if m:
            cur = {'index': int(m.group(1)), 'name': m.group(2), 'uuid': m.group(3) or '',
                   'lines': []}
            blocks.append(cur)
            continue
        if cur is None:
            raise ParseError('%s line %d: expected "GPU <n>: ..." header, found %r'
                             % (what, n, line[:80]))
        cur['lines'].append((n, line))
    return blocks


@utf8_input('nvidia-smi nvlink -s')
def parse_nvlink_status(text):
    """Parse `nvidia-smi nvlink -s`. Returns {"GPU<n>": {index, name, uuid, supported,
    links: [{link, speed_gbps, state}]}}; speed_gbps is the GB/s figure nvidia-smi prints."""
    result = {}
    for b in _gpu_blocks(text, 'nvlink -s'):
        links = []
        supported = True
        all_inactive = False
        for n, line in b['lines']:
            low = line.lower()
            if 'does not have or support nvlink' in low or 'not supported' in low:
                supported = False
                continue
            if 'all links are inactive' in low:
                all_inactive = True
                continue
            m = _LINK_SPEED_RE.match(line)
            if not m:
                raise ParseError('nvlink -s GPU %d line %d: cannot parse %r' % (b['index'], n, line[:80]))
            val = m.group(2).strip()
            sm = re.match(r'^([0-9.]+)\s*GB/s$', val)
            if sm:
                links.append({'link': int(m.group(1)), 'speed_gbps': float(sm.group(1)), 'state': 'active'})
            elif 'inactive' in val.lower():
                links.append({'link': int(m.group(1)), 'speed_gbps': 0.0, 'state': 'inactive'})
            else:
                raise ParseError('nvlink -s GPU %d link %s: cannot parse speed %r'
                                 % (b['index'], m.group(1), val))
        result['GPU%d' % b['index']] = {
            'index': b['index'], 'name': b['name'], 'uuid': b['uuid'],
            'supported': supported, 'all_inactive': all_inactive, 'links': links,
        }
    return result


_LINK_ERR_RE = re.compile(r'^Link (\d+): ([A-Za-z][A-Za-z ]*?)\s*:\s*(\S+)$')


def _counter_key(name):
    return re.sub(r'[^a-z0-9]+', '_', name.strip().lower()).strip('_')


@utf8_input('nvidia-smi nvlink -e')
def parse_nvlink_errors(text):
    """Parse `nvidia-smi nvlink -e`. Returns {"GPU<n>": {index, name, uuid,
    links: {<link>: {"replay_errors": 0, "recovery_errors": 0, "crc_errors": 0}}}}.
    Elided lines ("[...]") are skipped."""
    result = {}
    for b in _gpu_blocks(text, 'nvlink -e'):
        links = {}
        for n, line in b['lines']:
            if line in ('[...]', '...'):
                continue
            if 'does not have or support nvlink' in line.lower() or 'inactive' in line.lower():
                continue
            m = _LINK_ERR_RE.match(line)
            if not m:
                raise ParseError('nvlink -e GPU %d line %d: cannot parse %r' % (b['index'], n, line[:80]))
            val = m.group(3)
            try:
                num = int(val)
            except ValueError:
                if val in ('N/A', '[N/A]'):
                    num = None
                else:
                    raise ParseError('nvlink -e GPU %d link %s %s: not a number: %r'
                                     % (b['index'], m.group(1), m.group(2), val))
            links.setdefault(int(m.group(1)), {})[_counter_key(m.group(2))] = num
        result['GPU%d' % b['index']] = {'index': b['index'], 'name': b['name'], 'uuid': b['uuid'],
                                        'links': links}
    return result


# --------------------------------------------------------------------------
# nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]
# --------------------------------------------------------------------------

# Fields gpu_health asks for (valid on drivers >= 535; names from --help-query-gpu).
HEALTH_QUERY_FIELDS = [
    'index', 'name', 'uuid', 'pci.bus_id', 'driver_version', 'persistence_mode',
    'ecc.errors.uncorrected.volatile.total', 'ecc.errors.uncorrected.aggregate.total',
    'retired_pages.pending', 'retired_pages.double_bit.count',
    'remapped_rows.pending', 'remapped_rows.failure', 'remapped_rows.uncorrectable',
    'pcie.link.gen.current', 'pcie.link.gen.max', 'pcie.link.width.current', 'pcie.link.width.max',
    'temperature.gpu', 'power.draw', 'power.limit',
    'clocks_event_reasons.hw_slowdown', 'clocks_event_reasons.hw_thermal_slowdown',
    'clocks_event_reasons.hw_power_brake_slowdown', 'clocks_event_reasons.sw_thermal_slowdown',
    'fabric.state', 'fabric.status',
]

# Fields gpu_settings reads (see docs/DESIGN.md).
SETTINGS_QUERY_FIELDS = [
    'index', 'persistence_mode', 'power.limit', 'power.min_limit', 'power.max_limit',
    'clocks.applications.memory', 'clocks.applications.graphics',
]

_NA_VALUES = ('N/A', '[N/A]', 'Not Supported', '[Not Supported]', '', 'Unknown', '[Unknown]')
_NUM_RE = re.compile(r'^(-?\d+(?:\.\d+)?)\s*(?:W|MHz|%|C|MiB|KiB|GiB|x|us|KB/s)?$')


def is_na(value):
    v = (value or '').strip()
    return v in _NA_VALUES or (v.startswith('[') and v.endswith(']'))


def to_number(value, what):
    """'700.00' / '700.00 W' -> 700.0, '16x' -> 16; N/A forms -> None."""
    if value is None or is_na(value):
        return None
    m = _NUM_RE.match(value.strip())
    if not m:
        raise ParseError('%s: not a number: %r' % (what, value))
    s = m.group(1)
    return float(s) if '.' in s else int(s)


def to_bool(value, what):
    """Enabled/Disabled, Active/Not Active, Yes/No, 1/0 -> bool; N/A forms -> None."""
    if value is None or is_na(value):
        return None
    v = value.strip().lower()
    if v in ('enabled', 'active', 'yes', '1', 'true'):
        return True
    if v in ('disabled', 'not active', 'no', '0', 'false'):
        return False
    raise ParseError('%s: not a boolean state: %r' % (what, value))


@utf8_input('nvidia-smi --query-gpu')
def parse_query_csv(text, fields=None):
    """Parse `--query-gpu` CSV into a list of {field: raw string} dicts.

    With a header line (plain `--format=csv`), unit suffixes like " [W]" are
    removed from field names. Without one, `fields` gives the names.
    """
    if not isinstance(text, str) or not text.strip():
        raise ParseError('query-gpu output is empty')
    lines = [l for l in text.splitlines() if l.strip()]
    first = [c.strip() for c in lines[0].split(',')]
    cell_re = re.compile(r'^[a-z_][A-Za-z0-9_.]*( \[.*\])?$')
    has_header = fields is None or (first[0].split(' [')[0] == fields[0]
                                    and all(cell_re.match(c) for c in first))
    if has_header:
        header = [re.sub(r'\s*\[.*\]$', '', c) for c in first]
        lines = lines[1:]
    else:
        header = list(fields)
    rows = []
    for n, line in enumerate(lines, 1):
        values = [c.strip() for c in line.split(',')]
        if len(values) != len(header):
            raise ParseError('query-gpu row %d: expected %d fields, found %d (truncated or wrong field list?)'
                             % (n, len(header), len(values)))
        rows.append(dict(zip(header, values)))
    if not rows:
        raise ParseError('query-gpu output has a header but no GPU rows')
    return rows


# Health record key -> the --query-gpu field it is read from, and how (the record's order).
RECORD_FIELDS = [
    ('name', 'name', 'text'), ('uuid', 'uuid', 'text'), ('bus_id', 'pci.bus_id', 'text'),
    ('driver_version', 'driver_version', 'text'), ('persistence_mode', 'persistence_mode', 'flag'),
    ('ecc_uncorrected_volatile', 'ecc.errors.uncorrected.volatile.total', 'number'),
    ('ecc_uncorrected_aggregate', 'ecc.errors.uncorrected.aggregate.total', 'number'),
    ('retired_pages_pending', 'retired_pages.pending', 'flag'),
    ('retired_pages_dbe', 'retired_pages.double_bit.count', 'number'),
    ('remapped_rows_pending', 'remapped_rows.pending', 'flag'),
    ('remapped_rows_failure', 'remapped_rows.failure', 'flag'),
    ('remapped_rows_uncorrectable', 'remapped_rows.uncorrectable', 'number'),
    ('pcie_gen_current', 'pcie.link.gen.current', 'number'), ('pcie_gen_max', 'pcie.link.gen.max', 'number'),
    ('pcie_width_current', 'pcie.link.width.current', 'number'),
    ('pcie_width_max', 'pcie.link.width.max', 'number'),
    ('temperature_c', 'temperature.gpu', 'number'), ('power_draw_w', 'power.draw', 'number'),
    ('power_limit_w', 'power.limit', 'number'),
    ('throttle_hw_slowdown', 'clocks_event_reasons.hw_slowdown', 'flag'),
    ('throttle_hw_thermal', 'clocks_event_reasons.hw_thermal_slowdown', 'flag'),
    ('throttle_hw_power_brake', 'clocks_event_reasons.hw_power_brake_slowdown', 'flag'),
    ('throttle_sw_thermal', 'clocks_event_reasons.sw_thermal_slowdown', 'flag'),
    ('fabric_state', 'fabric.state', 'text'), ('fabric_status', 'fabric.status', 'text'),
]


def normalize_query_row(row):
    """Turn one raw --query-gpu row (HEALTH_QUERY_FIELDS) into the common health record."""
    idx = row.get('index')
    who = 'GPU %s' % idx

    def num(field):
        return to_number(row.get(field), '%s %s' % (who, field)) if field in row else None

    def flag(field):
        return to_bool(row.get(field), '%s %s' % (who, field)) if field in row else None

    def text(field):
        v = row.get(field)
        return None if v is None or is_na(v) else v

    try:
        index = int(idx)
    except (TypeError, ValueError):
        raise ParseError('query-gpu: index is not an integer: %r' % (idx,))
    record = {'index': index}
    for key, field, kind in RECORD_FIELDS:
        record[key] = {'number': num, 'flag': flag, 'text': text}[kind](field)
    record['bus_id'] = normalize_bus_id(record['bus_id'])
    return record


def parse_health_query(text, fields=None):
    """query-gpu CSV (HEALTH_QUERY_FIELDS, noheader/nounits) -> list of health records."""
    return [normalize_query_row(r) for r in parse_query_csv(text, fields or HEALTH_QUERY_FIELDS)]


def parse_settings_query(text):
    """gpu_settings read-back CSV -> list of {index, persistence_mode, power_limit_w,
    power_min_w, power_max_w, app_clock_memory_mhz, app_clock_graphics_mhz}."""
    out = []
    for row in parse_query_csv(text, SETTINGS_QUERY_FIELDS):
        who = 'GPU %s' % row.get('index')
        try:
            index = int(row['index'])
        except ValueError:
            raise ParseError('query-gpu: index is not an integer: %r' % row['index'])
        out.append({
            'index': index,
            'persistence_mode': to_bool(row['persistence_mode'], who + ' persistence_mode'),
            'power_limit_w': to_number(row['power.limit'], who + ' power.limit'),
            'power_min_w': to_number(row['power.min_limit'], who + ' power.min_limit'),
            'power_max_w': to_number(row['power.max_limit'], who + ' power.max_limit'),
            'app_clock_memory_mhz': to_number(row['clocks.applications.memory'],
                                              who + ' clocks.applications.memory'),
            'app_clock_graphics_mhz': to_number(row['clocks.applications.graphics'],
                                                who + ' clocks.applications.graphics'),
        })
    return out


def normalize_bus_id(bus_id):
    """'00000000:83:00.0' / '0000:83:00.0' / '0000:83:00' -> '0000:83:00.0' (lower case)."""
    if not bus_id:
        return bus_id
    m = re.match(r'^(?:([0-9A-Fa-f]+):)?([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.([0-7]))?$', bus_id.strip())
    if not m:
        raise ParseError('cannot parse PCI bus id %r' % bus_id)
    domain = int(m.group(1) or '0', 16)
    return '%04x:%s:%s.%s' % (domain, m.group(2).lower(), m.group(3).lower(), m.group(4) or '0')


# --------------------------------------------------------------------------
# nvidia-smi -q (text)
# --------------------------------------------------------------------------

_KV_RE = re.compile(r'^(\s*)(\S.*?)\s*:\s?(.*)$')


@utf8_input('nvidia-smi -q')
def parse_nvsmi_q_tree(text):
    """Parse `nvidia-smi -q` (any -d selection) into {"header": {...}, "gpus": [tree,...]}.

    Each GPU tree is a nested dict keyed by the printed labels; it also carries
    "_bus_id" from the "GPU 00000000:83:00.0" line. Repeated labels get " #2" suffixes.
    """
    if not isinstance(text, str) or 'NVSMI LOG' not in text:
        raise ParseError('nvidia-smi -q output: "NVSMI LOG" banner not found')
    header = {}
    gpus = []
    stack = None  # list of (indent, dict)
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip() or line.strip().startswith('====='):
            continue
        m = re.match(r'^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$', line)
        if m:
            tree = {'_bus_id': m.group(1)}
            gpus.append(tree)
            stack = [(0, tree)]
            continue
        indent = len(line) - len(line.lstrip(' '))
        if stack is None:
            kv = _KV_RE.match(line)
            if kv and indent == 0:
                header[kv.group(2)] = kv.group(3).strip()
                continue
            raise ParseError('nvidia-smi -q line %d: unexpected text before the first GPU: %r'
                             % (n, line.strip()[:80]))
        if indent == 0:
            raise ParseError('nvidia-smi -q line %d: unexpected unindented text %r' % (n, line.strip()[:80]))
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        kv = _KV_RE.match(line)
        if kv:
            key, val = kv.group(2), kv.group(3).strip()
        else:
            key, val = line.strip(), None
        k = key
        c = 2
        while k in parent:
            k = '%s #%d' % (key, c)
            c += 1
        if val is None:
            child = {}
            parent[k] = child
            stack.append((indent, child))
        else:
            parent[k] = val
    attached = header.get('Attached GPUs')
    if attached is not None:
        try:
            want = int(attached)
        except ValueError:
            raise ParseError('nvidia-smi -q: "Attached GPUs" is not a number: %r' % attached)
        if want != len(gpus):
            raise ParseError('nvidia-smi -q: "Attached GPUs" says %d but %d GPU sections were found '
                             '(truncated output?)' % (want, len(gpus)))
    return {'header': header, 'gpus': gpus}


def _get(tree, *path):
    cur = tree
    for p in path:
        if not isinstance(cur, dict) or p not in cur:
            return None
        cur = cur[p]
    return cur


def _q_sum_uncorrectable(block, who, what):
    """Sum uncorrectable ECC counters of a Volatile/Aggregate block (any driver layout)."""
    if not isinstance(block, dict):
        return None
    total = 0
    seen = False
    for key, val in block.items():
        if isinstance(val, dict):
            # old layout: Double Bit -> Total
            if key.startswith('Double Bit'):
                v = to_number(val.get('Total'), '%s ECC %s %s' % (who, what, key))
                if v is not None:
                    total += v
                    seen = True
            continue
        if 'Uncorrectable' in key and 'Threshold' not in key:
            v = to_number(val, '%s ECC %s %s' % (who, what, key))
            if v is not None:
                total += v
                seen = True
    return total if seen else None


def _q_temp(val, who, what):
    return to_number((val or '').replace(' C', '') if val else val, '%s %s' % (who, what))


def normalize_q_gpu(tree, index, driver_version=None):
    """Common health record from one -q GPU tree (keys absent from the -q selection are None)."""
    who = 'GPU %d' % index

    def num(*path):
        v = _get(tree, *path)
        return to_number(v, '%s %s' % (who, ' / '.join(path))) if isinstance(v, str) else None

    def flag(*path):
        v = _get(tree, *path)
        return to_bool(v, '%s %s' % (who, ' / '.join(path))) if isinstance(v, str) else None

    def text(*path):
        v = _get(tree, *path)
        return None if not isinstance(v, str) or is_na(v) else v

    ecc = _get(tree, 'ECC Errors') or {}
    temp = _get(tree, 'Temperature') or {}
    cur = _q_temp(temp.get('GPU Current Temp'), who, 'GPU Current Temp')
    slowdown = _q_temp(temp.get('GPU Slowdown Temp'), who, 'GPU Slowdown Temp')
    shutdown = _q_temp(temp.get('GPU Shutdown Temp'), who, 'GPU Shutdown Temp')
    tlimit = _q_temp(temp.get('GPU T.Limit Temp'), who, 'GPU T.Limit Temp')
    # Newer drivers print thresholds relative to T.Limit: "GPU T.Limit Temp" is the current
    # margin below T.Limit, "GPU Slowdown T.Limit Temp" the margin at which slowdown starts.
    if slowdown is None and cur is not None and tlimit is not None:
        off = _q_temp(temp.get('GPU Slowdown T.Limit Temp'), who, 'GPU Slowdown T.Limit Temp')
        if off is not None:
            slowdown = cur + tlimit - off
    if shutdown is None and cur is not None and tlimit is not None:
        off = _q_temp(temp.get('GPU Shutdown T.Limit Temp'), who, 'GPU Shutdown T.Limit Temp')
        if off is not None:
            shutdown = cur + tlimit - off
    power = _get(tree, 'GPU Power Readings') or _get(tree, 'Power Readings') or {}
    draw = None
    for key in ('Power Draw', 'Average Power Draw', 'Instantaneous Power Draw'):
        if isinstance(power.get(key), str) and not is_na(power[key]):
            draw = power[key]
            break
    ceiling = power.get('GPU Ceiling Power Limit')
    limit = power.get('Current Power Limit', power.get('Power Limit'))
    if limit is None and isinstance(ceiling, dict):
        limit = ceiling.get('Current Power Limit')
    reasons = _get(tree, 'Clocks Event Reasons') or _get(tree, 'Clocks Throttle Reasons')
    if isinstance(reasons, dict):
        hw_thermal = reasons.get('HW Thermal Slowdown')
        hw_brake = reasons.get('HW Power Brake Slowdown')
    else:
        hw_thermal = hw_brake = None
    retired = _get(tree, 'Retired Pages') or {}
    dbe = retired.get('Double Bit ECC')
    if isinstance(dbe, dict):
        dbe = dbe.get('Count')
    pending = retired.get('Pending Page Blacklist', retired.get('Pending'))
    remap = _get(tree, 'Remapped Rows')
    remap = remap if isinstance(remap, dict) else {}
    rec = {
        'index': index,
        'name': text('Product Name'),
        'uuid': text('GPU UUID'),
        'bus_id': normalize_bus_id(tree.get('_bus_id')),
        'driver_version': driver_version,
        'persistence_mode': flag('Persistence Mode'),
        'ecc_uncorrected_volatile': _q_sum_uncorrectable(ecc.get('Volatile'), who, 'Volatile'),
        'ecc_uncorrected_aggregate': _q_sum_uncorrectable(ecc.get('Aggregate'), who, 'Aggregate'),
        'retired_pages_pending': to_bool(pending, who + ' Retired Pages Pending') if isinstance(pending, str) else None,
        'retired_pages_dbe': to_number(dbe, who + ' Retired Pages Double Bit ECC') if isinstance(dbe, str) else None,
        'remapped_rows_pending': to_bool(remap.get('Pending'), who + ' Remapped Rows Pending') if 'Pending' in remap else None,
        'remapped_rows_failure': (to_bool(remap.get('Remapping Failure Occurred'), who + ' Remapping Failure Occurred')
                                  if 'Remapping Failure Occurred' in remap else None),
        'remapped_rows_uncorrectable': (to_number(remap.get('Uncorrectable Error'), who + ' Remapped Rows Uncorrectable')
                                        if 'Uncorrectable Error' in remap else None),
        'pcie_gen_current': num('PCI', 'GPU Link Info', 'PCIe Generation', 'Current'),
        'pcie_gen_max': num('PCI', 'GPU Link Info', 'PCIe Generation', 'Max'),
        'pcie_width_current': num('PCI', 'GPU Link Info', 'Link Width', 'Current'),
        'pcie_width_max': num('PCI', 'GPU Link Info', 'Link Width', 'Max'),
        'temperature_c': cur,
        'power_draw_w': to_number(draw, who + ' Power Draw') if isinstance(draw, str) else None,
        'power_limit_w': to_number(limit, who + ' Current Power Limit') if isinstance(limit, str) else None,
        'throttle_hw_slowdown': to_bool(reasons.get('HW Slowdown'), who + ' HW Slowdown')
        if isinstance(reasons, dict) and 'HW Slowdown' in reasons else None,
        'throttle_hw_thermal': to_bool(hw_thermal, who + ' HW Thermal Slowdown') if isinstance(hw_thermal, str) else None,
        'throttle_hw_power_brake': to_bool(hw_brake, who + ' HW Power Brake Slowdown') if isinstance(hw_brake, str) else None,
        'throttle_sw_thermal': to_bool(reasons.get('SW Thermal Slowdown'), who + ' SW Thermal Slowdown')
        if isinstance(reasons, dict) and 'SW Thermal Slowdown' in reasons else None,
        'fabric_state': text('Fabric', 'State'),
        'fabric_status': text('Fabric', 'Status'),
        'slowdown_temp_c': slowdown,
        'shutdown_temp_c': shutdown,
    }
    return rec


def parse_nvsmi_q(text):
    """`nvidia-smi -q` text -> list of health records (one per GPU, index = section order)."""
    parsed = parse_nvsmi_q_tree(text)
    drv = parsed['header'].get('KMD Version') or parsed['header'].get('Driver Version')
    if drv:
        drv = drv.split(' [')[0].strip()
    if parsed['gpus'] and 'Clocks Event Reasons' in parsed['gpus'][0]:
        expected = ('HW Slowdown', 'SW Thermal Slowdown')
        for i, g in enumerate(parsed['gpus']):
            r = g.get('Clocks Event Reasons')
            if isinstance(r, dict) and not all(k in r for k in expected):
                raise ParseError('nvidia-smi -q GPU %d: "Clocks Event Reasons" lacks %s (found %s)'
                                 % (i, ' / '.join(k for k in expected if k not in r),
                                    ', '.join(sorted(r))[:120]))
    return [normalize_q_gpu(g, i, drv) for i, g in enumerate(parsed['gpus'])]


# --------------------------------------------------------------------------
# Kernel log: NVRM Xid
# --------------------------------------------------------------------------

# Xids that mean the GPU needs a reset, RMA or node drain (fail). Chosen from NVIDIA's
# Xid catalogue and Azure aznhc's critical list: 48 DBE, 56/57/58 display/memory, 62/63/64
# internal/ECC page retirement/row remap, 65, 68, 69, 73, 74 NVLink, 79 fell off the bus,
# 80, 81, 92 high SBE rate, 94/95 contained/uncontained ECC, 119/120 GSP timeout/error,
# 140 ECC unrecovered, 143, 144-150 NVLink/NVSwitch.
XID_CRITICAL = frozenset([48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 94, 95,
                          119, 120, 140, 143, 144, 145, 146, 147, 148, 149, 150])
# Everything else (e.g. 13 graphics exception, 31 MMU fault, 43 reset channel, 45 preemptive
# cleanup) is usually an application fault: warn.

_XID_RE = re.compile(r'NVRM: Xid \(PCI:([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): (\d+),\s*(.*)$')


def parse_xid_log(text):
    """Find `NVRM: Xid (PCI:0000:9b:00): 119, ...` lines. Returns a list of
    {bus_id, xid, severity (fail|warn), message, line}."""
    events = []
    for n, line in enumerate((text or '').splitlines(), 1):
        if 'NVRM: Xid' not in line:
            continue
        m = _XID_RE.search(line)
        if not m:
            raise ParseError('kernel log line %d: cannot parse Xid line %r' % (n, line.strip()[:100]))
        xid = int(m.group(2))
        events.append({
            'bus_id': normalize_bus_id(m.group(1)),
            'xid': xid,
            'severity': 'fail' if xid in XID_CRITICAL else 'warn',
            'message': m.group(3).strip(),
            'line': n,
        })
    return events


# --------------------------------------------------------------------------
# Multi-section capture files (# $ nvidia-smi ... headers between #### lines)
# --------------------------------------------------------------------------

def split_capture_sections(text):
    """Split a capture file into {command: body}; first occurrence of a command wins."""
    sections = {}
    lines = text.splitlines(True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith('# $ '):
            cmd = line[4:].strip()
            j = i + 1
            if j < len(lines) and lines[j].startswith('####'):
                j += 1
            k = j
            while k < len(lines) and not lines[k].startswith('################'):
                k += 1
            sections.setdefault(cmd, ''.join(lines[j:k]))
            i = k
        else:
            i += 1
    return sections
