# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure evaluation logic shared by the modules: topology verification, per-GPU health
checks, RDMA port checks, gpu_settings planning, Prometheus textfile rendering."""

from __future__ import absolute_import, division, print_function

from ansible.module_utils.check_result import from_severity_map
from ansible.module_utils.gpu_parsers import (DISTANCE_ORDER, RECORD_FIELDS, ParseError, distance_rank,
                                              nvlink_count)

__metaclass__ = type

SEVERITIES = ('ok', 'warn', 'fail')
_LABELS = {
    'link_code': 'link', 'min_nvlinks': 'nvlinks', 'nic_max_distance': 'nic distance',
    'gpu_count': 'gpu count', 'nic_count': 'nic count', 'nvlinks_active': 'link state',
    'links_per_gpu': 'nvlink count', 'symmetry': 'matrix',
}


def mismatch_msg(what, mismatches):
    parts = []
    for m in mismatches:
        label = _LABELS.get(m['check'], m['check'])
        parts.append('%s %s expected %s found %s' % (m['item'], label, m['expected'], m['found']))
    noun = 'mismatch' if len(mismatches) == 1 else 'mismatches'
    return '%d %s %s: %s' % (len(mismatches), what, noun, '; '.join(parts))


# --------------------------------------------------------------------------
# nvlink_topology
# --------------------------------------------------------------------------

def _gpu_sort_key(name):
    return int(name[3:]) if name.startswith('GPU') and name[3:].isdigit() else 0


def verify_topology(topology, expected):
    """Return a list of mismatches {item, check, expected, found} (empty when all match)."""
    expected = expected or {}
    mm = []
    gpus = topology['gpus']
    links = topology['links']
    # A link is one link seen from both ends: a matrix that disagrees with itself cannot be accounted for.
    devices = [d for d in gpus + list(topology.get('nics') or []) if d in links]
    for i, a in enumerate(devices):
        for b in devices[i + 1:]:
            ab, ba = links[a].get(b), links[b].get(a)
            if ab != ba:
                mm.append({'item': '%s-%s' % (a, b), 'check': 'symmetry', 'expected': 'the same link both ways',
                           'found': 'nvidia-smi topo -m %s->%s %s but %s->%s %s' % (a, b, ab, b, a, ba)})
    if expected.get('gpu_count') is not None and int(expected['gpu_count']) != topology['gpu_count']:
        mm.append({'item': 'node', 'check': 'gpu_count', 'expected': int(expected['gpu_count']),
                   'found': topology['gpu_count']})
    if expected.get('nic_count') is not None and int(expected['nic_count']) != len(topology['nics']):
        mm.append({'item': 'node', 'check': 'nic_count', 'expected': int(expected['nic_count']),
                   'found': len(topology['nics'])})
    code = expected.get('link_code')
    min_nv = expected.get('min_nvlinks')
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            found = links.get(a, {}).get(b)
            if code:
                if found != code:
                    mm.append({'item': '%s-%s' % (a, b), 'check': 'link_code', 'expected': code,
                               'found': found})
            elif min_nv is not None and nvlink_count(found) < int(min_nv):
                mm.append({'item': '%s-%s' % (a, b), 'check': 'min_nvlinks',
                           'expected': 'NV%d or more' % int(min_nv), 'found': found})
    dist = expected.get('nic_max_distance')
    if dist:
        if dist not in DISTANCE_ORDER:
            raise ParseError('expected.nic_max_distance %r is not one of %s' % (dist, ', '.join(DISTANCE_ORDER)))
        limit = DISTANCE_ORDER.index(dist)
        for g in gpus:
            row = [(n, links.get(g, {}).get(n)) for n in topology['nics']]
            row = [(n, c) for n, c in row if c]
            best = min(row, key=lambda nc: distance_rank(nc[1])) if row else None
            if best is None or distance_rank(best[1]) > limit:
                mm.append({'item': '%s nic' % g, 'check': 'nic_max_distance', 'expected': '%s or closer' % dist,
                           'found': '%s (%s)' % (best[1], best[0]) if best else 'no NIC'})
    status = topology.get('nvlink')
    if expected.get('nvlinks_active') and status is not None:
        for g in gpus:
            st = status.get(g)
            if st is None:
                mm.append({'item': '%s nvlink' % g, 'check': 'nvlinks_active', 'expected': 'active',
                           'found': 'not reported'})
            elif st['all_inactive']:
                mm.append({'item': '%s nvlink' % g, 'check': 'nvlinks_active', 'expected': 'active',
                           'found': 'all links inactive'})
            elif not st['supported']:
                mm.append({'item': '%s nvlink' % g, 'check': 'nvlinks_active', 'expected': 'active',
                           'found': 'no NVLink'})
            else:
                for link in st['links']:
                    if link['state'] != 'active':
                        mm.append({'item': '%s link %d' % (g, link['link']), 'check': 'nvlinks_active',
                                   'expected': 'active', 'found': link['state']})
    per_gpu = expected.get('links_per_gpu')
    if per_gpu is not None and status is not None:
        for g in gpus:
            st = status.get(g) or {'links': []}
            n = len([x for x in st['links'] if x['state'] == 'active'])
            if n != int(per_gpu):
                mm.append({'item': '%s nvlink' % g, 'check': 'links_per_gpu', 'expected': int(per_gpu),
                           'found': n})
    thresholds = expected.get('max_nvlink_errors')
    errors = topology.get('nvlink_errors')
    if thresholds is not None and errors is not None:
        for g in sorted(errors, key=_gpu_sort_key):
            for link in sorted(errors[g]['links'], key=int):
                for counter, value in sorted(errors[g]['links'][link].items()):
                    if isinstance(thresholds, dict):
                        limit = thresholds.get(counter)
                        if limit is None:
                            continue
                    else:
                        limit = thresholds
                    if value is not None and value > int(limit):
                        mm.append({'item': '%s link %s' % (g, link), 'check': 'max_nvlink_errors.%s' % counter,
                                   'expected': '<= %d' % int(limit), 'found': value})
    return mm


# --------------------------------------------------------------------------
# gpu_health
# --------------------------------------------------------------------------

def merge_records(primary, secondary):
    """Fill None fields of the query-gpu records from the -q records (matched by bus id).

    Both must describe the same GPUs: a GPU that one lists and the other does not (a truncated or
    mixed-up output) raises ParseError naming the bus ids."""
    by_bus = dict((r.get('bus_id'), r) for r in secondary)
    ours = set(r.get('bus_id') for r in primary)
    if secondary and (ours != set(by_bus) or len(secondary) != len(primary)):
        raise ParseError('nvidia-smi --query-gpu lists GPUs %s but nvidia-smi -q lists %s'
                         % (', '.join(sorted(str(b) for b in ours)), ', '.join(sorted(str(b) for b in by_bus))))
    out = []
    for rec in primary:
        other = by_bus.get(rec.get('bus_id')) or {}
        merged = dict(rec)
        for k, v in other.items():
            if merged.get(k) is None and v is not None and k != 'index':
                merged[k] = v
        for k in ('slowdown_temp_c', 'shutdown_temp_c'):
            merged.setdefault(k, None)
        out.append(merged)
    return out


def _chk(severity, message, value=None):
    return {'severity': severity, 'message': message, 'value': value}


def driver_matches(actual, wanted):
    if wanted is None or wanted == '':
        return True
    wanted = str(wanted)
    return actual == wanted or (actual or '').startswith(wanted.rstrip('.') + '.')


# Where each record field comes from (nvidia-smi --query-gpu name, or the -q label), for reasons, and
# the range a real GPU can report: anything outside is a reading we cannot account for.
FIELD_SOURCES = dict([(key, field) for key, field, _kind in RECORD_FIELDS]
                     + [('slowdown_temp_c', '-q GPU Slowdown Temp'), ('shutdown_temp_c', '-q GPU Shutdown Temp')])
FIELD_RANGES = {
    'ecc_uncorrected_volatile': (0, 2 ** 53), 'ecc_uncorrected_aggregate': (0, 2 ** 53),
    'retired_pages_dbe': (0, 100000), 'remapped_rows_uncorrectable': (0, 100000),
    'pcie_gen_current': (1, 6), 'pcie_gen_max': (1, 6), 'pcie_width_current': (1, 32), 'pcie_width_max': (1, 32),
    'temperature_c': (0, 150), 'power_draw_w': (0, 5000), 'power_limit_w': (1, 5000),
    'slowdown_temp_c': (30, 150), 'shutdown_temp_c': (30, 160),
}
FABRIC_STATES = ('Not Supported', 'Not Started', 'In Progress', 'Completed')


def _bad_values(rec, fields, needed=True):
    """Reasons for fields that are missing (when needed) or outside what a GPU can report."""
    out = []
    for f in fields:
        v = rec.get(f)
        if v is None:
            if needed:
                out.append('nvidia-smi %s not reported (N/A)' % FIELD_SOURCES.get(f, f))
            continue
        lo_hi = FIELD_RANGES.get(f)
        if lo_hi and (isinstance(v, bool) or not isinstance(v, (int, float)) or not lo_hi[0] <= v <= lo_hi[1]):
            out.append('nvidia-smi %s value %r outside %s..%s' % (FIELD_SOURCES.get(f, f), v, lo_hi[0], lo_hi[1]))
    return out


def _unaccounted(rec, fields, needed=True, value=None):
    """A fail naming the fields a check cannot account for (not reported when needed, or impossible), else None."""
    bad = _bad_values(rec, fields, needed)
    if bad:
        return _chk('fail', '; '.join(bad), value if value is not None else dict((f, rec.get(f)) for f in fields))
    return None


# The per-GPU checks, in report order: name -> function(rec, expected, ctx) returning
# {severity, message, value}. ctx: xid_events, kernel_log_error, temperature_margin_c, fabric_manager.
# Adding a check is one function here (with @gpu_check) and its test; the module's RETURN, the readiness
# report and the Prometheus health timer take every registered check as it comes.
GPU_CHECKS = []


def gpu_check(name):
    def register(fn):
        GPU_CHECKS.append((name, fn))
        return fn
    return register


@gpu_check('driver_version')
def _check_driver(rec, expected, ctx):
    drv = rec.get('driver_version')
    want = expected.get('driver_version')
    bad = _unaccounted(rec, ['driver_version'], value=drv)
    if bad:
        return bad
    if want and not driver_matches(drv, want):
        return _chk('fail', 'driver %s, expected %s' % (drv, want), drv)
    return _chk('ok', 'driver %s' % drv, drv)


@gpu_check('persistence_mode')
def _check_persistence(rec, expected, ctx):
    pm = rec.get('persistence_mode')
    want_pm = expected.get('persistence_mode', True)
    bad = _unaccounted(rec, ['persistence_mode'], value=pm)
    if bad:
        return bad
    if bool(pm) == bool(want_pm):
        return _chk('ok', 'persistence mode %s' % ('enabled' if pm else 'disabled'), pm)
    sev = 'fail' if 'persistence_mode' in expected else 'warn'
    return _chk(sev, 'persistence mode %s, expected %s' % (
        'enabled' if pm else 'disabled', 'enabled' if want_pm else 'disabled'), pm)


@gpu_check('ecc')
def _check_ecc(rec, expected, ctx):
    vol, agg = rec.get('ecc_uncorrected_volatile'), rec.get('ecc_uncorrected_aggregate')
    val = {'volatile_uncorrected': vol, 'aggregate_uncorrected': agg}
    bad = _unaccounted(rec, ['ecc_uncorrected_volatile', 'ecc_uncorrected_aggregate'],
                       needed=expected.get('ecc', True), value=val)
    if bad:
        return bad
    if vol is None and agg is None:
        return _chk('ok', 'ECC counters not reported (expected.ecc is false: ECC off or unsupported)', val)
    if vol:
        return _chk('fail', '%d volatile uncorrectable ECC errors (aggregate %s)' % (vol, agg), val)
    if agg:
        return _chk('warn', '%d aggregate uncorrectable ECC errors (none since reset)' % agg, val)
    return _chk('ok', 'no uncorrectable ECC errors', val)


def _repairs(rec):
    """(retires, remaps): whether the GPU reports page retirement / row remapping at all. A GPU reports its
    memory repairs one way: retired pages (up to Volta) or row remapping (Ampere on)."""
    retires = rec.get('retired_pages_pending') is not None or rec.get('retired_pages_dbe') is not None
    remaps = rec.get('remapped_rows_pending') is not None or rec.get('remapped_rows_failure') is not None
    return retires, remaps


@gpu_check('retired_pages')
def _check_retired_pages(rec, expected, ctx):
    pend, dbe = rec.get('retired_pages_pending'), rec.get('retired_pages_dbe')
    remaps = _repairs(rec)[1]
    val = {'pending': pend, 'double_bit': dbe}
    max_dbe = expected.get('max_retired_pages', 60)
    bad = _unaccounted(rec, ['retired_pages_pending', 'retired_pages_dbe'],
                       needed=expected.get('memory_repairs_reported', True) and not remaps, value=val)
    if bad:
        return bad
    if pend:
        return _chk('fail', 'page retirement pending (GPU reset needed), %s double-bit retired' % dbe, val)
    if dbe is not None and dbe >= int(max_dbe):
        return _chk('fail', '%d double-bit retired pages (limit %d)' % (dbe, int(max_dbe)), val)
    if dbe:
        return _chk('warn', '%d double-bit retired pages' % dbe, val)
    return _chk('ok', 'no pending page retirement' if pend is not None
                else 'page retirement not reported (row remapping GPU)' if remaps
                else 'not reported, as expected.memory_repairs_reported says', val)


@gpu_check('row_remap')
def _check_row_remap(rec, expected, ctx):
    rp, rf, ru = rec.get('remapped_rows_pending'), rec.get('remapped_rows_failure'), \
        rec.get('remapped_rows_uncorrectable')
    retires = _repairs(rec)[0]
    val = {'pending': rp, 'failure': rf, 'uncorrectable': ru}
    bad = _unaccounted(rec, ['remapped_rows_pending', 'remapped_rows_failure', 'remapped_rows_uncorrectable'],
                       needed=expected.get('memory_repairs_reported', True) and not retires, value=val)
    if bad:
        return bad
    if rp is not None and (rf is None or ru is None):
        return _chk('fail', 'nvidia-smi remapped_rows reported in part: %s' % val, val)
    if rf:
        return _chk('fail', 'row remapping failure occurred (RMA candidate)', val)
    if rp:
        sev = 'fail' if expected.get('row_remap_pending_fail', True) else 'warn'
        return _chk(sev, 'row remapping pending (GPU reset needed), %s uncorrectable' % ru, val)
    if rp is None and rf is None:
        return _chk('ok', 'row remapping not reported (page retirement GPU)' if retires
                    else 'not reported, as expected.memory_repairs_reported says', val)
    return _chk('ok', 'no pending row remap (%s uncorrectable rows remapped)' % ru, val)


@gpu_check('xid')
def _check_xid(rec, expected, ctx):
    xid_events = ctx.get('xid_events')
    if xid_events is None:
        return _chk('fail', 'Xid not checked: %s' % (ctx.get('kernel_log_error') or 'kernel log not read'), None)
    mine = [e for e in xid_events if e['bus_id'] == rec.get('bus_id')]
    if not mine:
        return _chk('ok', 'no Xid events', [])
    codes = sorted(set(e['xid'] for e in mine))
    sev = 'fail' if any(e['severity'] == 'fail' for e in mine) else 'warn'
    return _chk(sev, '%d Xid events, codes %s; last: %s' % (
        len(mine), ', '.join(str(x) for x in codes), mine[-1]['message'][:120]), codes)


@gpu_check('pcie')
def _check_pcie(rec, expected, ctx):
    gc, gm, wc, wm = (rec.get('pcie_gen_current'), rec.get('pcie_gen_max'), rec.get('pcie_width_current'),
                      rec.get('pcie_width_max'))
    val = {'gen_current': gc, 'gen_max': gm, 'width_current': wc, 'width_max': wm}
    pcie = expected.get('pcie') or {}
    eg, ew = pcie.get('gen'), pcie.get('width')
    bad = _unaccounted(rec, ['pcie_gen_current', 'pcie_gen_max', 'pcie_width_current', 'pcie_width_max'],
                       value=val)
    if bad:
        return bad
    want_w = int(ew) if ew is not None else wm
    want_g = int(eg) if eg is not None else gm
    if wc > wm or gc > gm:
        return _chk('fail', 'nvidia-smi PCIe link above its maximum: gen %s of %s, x%s of x%s' % (gc, gm, wc, wm),
                    val)
    if wc < want_w:
        return _chk('fail', 'PCIe width x%s, expected x%s' % (wc, want_w), val)
    if eg is not None and gm < int(eg):
        return _chk('fail', 'PCIe max gen %s, expected gen %s' % (gm, eg), val)
    if gc < want_g:
        return _chk('warn', 'PCIe gen %s below gen %s (may be idle link power saving)' % (gc, want_g), val)
    return _chk('ok', 'PCIe gen %s x%s' % (gc, wc), val)


@gpu_check('temperature')
def _check_temperature(rec, expected, ctx):
    t, slow = rec.get('temperature_c'), rec.get('slowdown_temp_c')
    alert = expected.get('temperature_alert_c')
    val = {'current': t, 'alert': alert, 'slowdown': slow}
    bad = _unaccounted(rec, ['temperature_c', 'slowdown_temp_c'], value=val)
    if bad:
        return bad
    if alert is None:
        alert = slow - int(ctx.get('temperature_margin_c', 5))
        val['alert'] = alert
    if t >= slow:
        return _chk('fail', '%s C at or above slowdown %s C' % (t, slow), val)
    if t >= alert:
        return _chk('warn', '%s C at or above alert %s C' % (t, alert), val)
    return _chk('ok', '%s C (alert %s C)' % (t, alert), val)


@gpu_check('throttle')
def _check_throttle(rec, expected, ctx):
    val = {'hw_slowdown': rec.get('throttle_hw_slowdown'), 'hw_thermal_slowdown': rec.get('throttle_hw_thermal'),
           'hw_power_brake_slowdown': rec.get('throttle_hw_power_brake'),
           'sw_thermal_slowdown': rec.get('throttle_sw_thermal')}
    active = [k for k in ('hw_slowdown', 'hw_thermal_slowdown', 'hw_power_brake_slowdown') if val[k]]
    if active:
        return _chk('fail', 'clock event reasons active: %s' % ', '.join(active), val)
    bad = _unaccounted(rec, ['throttle_hw_slowdown', 'throttle_hw_thermal', 'throttle_hw_power_brake',
                             'throttle_sw_thermal'], value=val)
    if bad:
        return bad
    if val['sw_thermal_slowdown']:
        return _chk('warn', 'software thermal slowdown active', val)
    return _chk('ok', 'no hardware slowdown', val)


@gpu_check('power')
def _check_power(rec, expected, ctx):
    draw, limit = rec.get('power_draw_w'), rec.get('power_limit_w')
    want_limit = (expected.get('power_limits_watts') or {}).get(str(rec.get('index')),
                                                                expected.get('power_limit_watts'))
    val = {'draw': draw, 'limit': limit}
    bad = _unaccounted(rec, ['power_draw_w', 'power_limit_w'], value=val)
    if bad:
        return bad
    if want_limit is not None and int(round(limit)) != int(want_limit):
        return _chk('warn', 'power limit %d W drifted from expected %d W' % (round(limit), int(want_limit)), val)
    if draw > limit * 1.05:
        return _chk('warn', 'power draw %.1f W above limit %.0f W' % (draw, limit), val)
    return _chk('ok', 'power %s W of %s W' % (draw, limit), val)


@gpu_check('fabric')
def _check_fabric(rec, expected, ctx):
    fs, fst, fm = rec.get('fabric_state'), rec.get('fabric_status'), ctx.get('fabric_manager')
    val = {'state': fs, 'status': fst, 'fabric_manager': fm}
    if expected.get('nvswitch'):
        if fs == 'Completed' and fst == 'Success':
            return _chk('ok', 'fabric registration Completed/Success', val)
        if fs is None and fst is None:
            # Pre-Hopper GPUs (A100) report no fabric registration: their NVSwitch fabric is Fabric
            # Manager's alone, so its service state is the reading.
            if fm == 'active':
                return _chk('ok', 'GPU reports no fabric registration (pre-Hopper); nvidia-fabricmanager is active',
                            val)
            return _chk('fail', 'GPU reports no fabric registration (pre-Hopper) and nvidia-fabricmanager is %s'
                        % (fm or 'not checked'), val)
        return _chk('fail', 'nvidia-smi fabric.state %r fabric.status %r, expected Completed/Success '
                    '(is nvidia-fabricmanager running?)' % (fs, fst), val)
    if fs is not None and fs not in FABRIC_STATES:
        return _chk('fail', 'nvidia-smi fabric.state %r is not a state nvidia-smi prints' % fs, val)
    return _chk('ok', 'fabric not checked (no NVSwitch expected), state %s' % fs, val)


def evaluate_gpu(rec, expected, xid_events, temperature_margin_c=5, fabric_manager=None, kernel_log_error=None):
    """Grade one GPU record with every registered check: {name: {severity, message, value}}. Fails closed:
    a field a check needs that is not reported, or a value no GPU can have, is a fail naming the nvidia-smi
    field and value (never ok)."""
    expected = expected or {}
    ctx = {'xid_events': xid_events, 'kernel_log_error': kernel_log_error,
           'temperature_margin_c': temperature_margin_c, 'fabric_manager': fabric_manager}
    return dict((name, fn(rec, expected, ctx)) for name, fn in GPU_CHECKS)


def _duplicates(values):
    seen, dup = set(), []
    for v in values:
        if v in seen and v not in dup:
            dup.append(v)
        seen.add(v)
    return dup


def evaluate_health(records, expected, xid_events, fail_on=('fail',), temperature_margin_c=5,
                    fabric_manager=None, kernel_log_error=None):
    """Returns (gpus, node, summary). fabric_manager: `systemctl is-active nvidia-fabricmanager`'s
    answer (active, inactive, failed, unknown...) or None when it was not read."""
    expected = expected or {}
    gpus = []
    for rec in sorted(records, key=lambda r: r['index']):
        gpus.append({'index': rec['index'], 'name': rec.get('name'), 'uuid': rec.get('uuid'),
                     'bus_id': rec.get('bus_id'),
                     'checks': evaluate_gpu(rec, expected, xid_events, temperature_margin_c, fabric_manager,
                                            kernel_log_error)})
    node = {}
    n = len(records)
    want = expected.get('gpu_count')
    indexes = sorted(r['index'] for r in records)
    dups = ['index %s' % v for v in _duplicates(r['index'] for r in records)]
    for field in ('bus_id', 'uuid'):
        values = [r.get(field) for r in records]
        dups += ['%s %s' % (field, v) for v in _duplicates(values)]
        if None in values:
            dups.append('%s not reported by GPU %s' % (field, ', '.join(
                str(r['index']) for r in records if r.get(field) is None)))
    if n == 0:
        node['count'] = _chk('fail', 'no GPUs found', 0)
    elif dups:
        node['count'] = _chk('fail', 'nvidia-smi rows do not describe distinct GPUs: %s' % '; '.join(dups), n)
    elif indexes != list(range(n)):
        node['count'] = _chk('fail', 'nvidia-smi GPU indexes %s, expected 0..%d' % (indexes, n - 1), indexes)
    elif want is not None and n < int(want):
        node['count'] = _chk('fail', 'found %d GPUs, expected %d (%d missing)' % (n, int(want), int(want) - n), n)
    elif want is not None and n > int(want):
        node['count'] = _chk('fail', 'found %d GPUs, expected %d (the profile does not match this node)'
                             % (n, int(want)), n)
    else:
        node['count'] = _chk('ok', 'found %d GPUs' % n, n)
    versions = sorted(set(r.get('driver_version') or '' for r in records))
    if len(versions) > 1:
        node['driver'] = _chk('fail', 'GPUs report different drivers: %s' % ', '.join(versions), versions)
    elif expected.get('driver_version') and versions and not driver_matches(versions[0], expected['driver_version']):
        node['driver'] = _chk('fail', 'driver %s, expected %s' % (versions[0], expected['driver_version']),
                              versions[0] if versions else None)
    else:
        node['driver'] = _chk('ok', 'driver %s' % (versions[0] if versions else None),
                              versions[0] if versions else None)
    if expected.get('nvswitch'):
        bad = [str(g['index']) for g in gpus if g['checks']['fabric']['severity'] == 'fail']
        if bad:
            node['fabric'] = _chk('fail', 'fabric not Completed/Success on GPU %s' % ', '.join(bad), bad)
        else:
            node['fabric'] = _chk('ok', 'fabric Completed/Success on all GPUs' if fabric_manager is None or all(
                g['checks']['fabric']['value']['state'] == 'Completed' for g in gpus)
                else 'fabric managed by nvidia-fabricmanager (%s)' % fabric_manager, [])
    else:
        node['fabric'] = _chk('ok', 'fabric not checked (no NVSwitch expected)', None)
    bus_ids = set(r.get('bus_id') for r in records)
    stray = [e for e in xid_events or [] if e['bus_id'] not in bus_ids]
    if stray:
        node['xid'] = _chk('warn', 'Xid events for PCI devices not in the GPU list: %s' % ', '.join(
            sorted(set('%s (Xid %d)' % (e['bus_id'], e['xid']) for e in stray))), len(stray))
    summary = summarize(
        [('GPU%d' % g['index'], g['checks']) for g in gpus] + [('node', node)], fail_on)
    return gpus, node, summary


def _expected_of(expected):
    """What each gpu_health check compared against, for the result format's `expected`."""
    pcie = expected.get('pcie') or {}
    return {
        'driver_version': expected.get('driver_version'), 'persistence_mode': expected.get('persistence_mode', True),
        'ecc': 'no volatile uncorrectable errors', 'retired_pages': 'none pending, fewer than %d double-bit'
        % int(expected.get('max_retired_pages', 60)), 'row_remap': 'none pending, no failure', 'xid': 'no Xid events',
        'pcie': dict((k, v) for k, v in (('gen', pcie.get('gen')), ('width', pcie.get('width'))) if v is not None)
        or 'at its maximum', 'temperature': {'below_alert_c': expected.get('temperature_alert_c')},
        'throttle': 'no hardware slowdown',
        'power': {'limit_w': expected.get('power_limits_watts') or expected.get('power_limit_watts')},
        'fabric': 'Completed/Success' if expected.get('nvswitch') else None,
        'count': expected.get('gpu_count'), 'driver': expected.get('driver_version'),
    }


def health_check_list(gpus, node, expected=None):
    """The one result format (module_utils/check_result.py) of evaluate_health's output."""
    exp = _expected_of(expected or {})
    out = []
    for g in gpus:
        out += from_severity_map('GPU%s' % g['index'], g['checks'], exp)
    return out + from_severity_map('node', node, exp)


def summarize(items, fail_on=('fail',)):
    counts = dict((s, 0) for s in SEVERITIES)
    failed, warned, hits = [], [], []
    for who, checks in items:
        for name in checks:
            sev = checks[name]['severity']
            counts[sev] += 1
            label = '%s %s' % (who, name)
            if sev == 'fail':
                failed.append(label)
            elif sev == 'warn':
                warned.append(label)
            if sev in fail_on:
                hits.append('%s (%s: %s)' % (label, sev, checks[name]['message']))
    verdict = 'fail' if counts['fail'] else ('warn' if counts['warn'] else 'ok')
    return {'ok': counts['ok'], 'warn': counts['warn'], 'fail': counts['fail'], 'failed_checks': failed,
            'warned_checks': warned, 'verdict': verdict, 'fail_on_hits': hits}


def render_prometheus(gpus, node, summary, fail_on=('fail',)):
    lines = ['# HELP gpu_health_check_status 1 for the current severity of each gpu_health check.',
             '# TYPE gpu_health_check_status gauge']
    for who, checks in [(str(g['index']), g['checks']) for g in gpus] + [('node', node)]:
        for name in sorted(checks):
            for sev in SEVERITIES:
                lines.append('gpu_health_check_status{gpu="%s",check="%s",severity="%s"} %d'
                             % (who, name, sev, 1 if checks[name]['severity'] == sev else 0))
    lines += ['# HELP gpu_health_gpus GPUs the pass read.', '# TYPE gpu_health_gpus gauge',
              'gpu_health_gpus %d' % len(gpus)]
    lines += ['# HELP gpu_health_ok 1 when no check is at a fail_on severity.', '# TYPE gpu_health_ok gauge',
              'gpu_health_ok %d' % (0 if summary['fail_on_hits'] else 1)]
    for sev in SEVERITIES:
        lines.append('gpu_health_checks{severity="%s"} %d' % (sev, summary[sev]))
    lines[-3:-3] = ['# HELP gpu_health_checks Number of checks per severity.', '# TYPE gpu_health_checks gauge']
    return '\n'.join(lines) + '\n'


# --------------------------------------------------------------------------
# rdma_health
# --------------------------------------------------------------------------

def _port_checker(port, checks, mm):
    """check(name, ok, expected, found, message[, failure]): records one port check in `checks` and, when it
    fails, a mismatch in `mm` (failure: the message then, default "expected X, found Y")."""
    item = '%s/%s' % (port['device'], port['port'])

    def check(name, ok, exp, found, message, failure=None):
        if ok:
            checks[name] = _chk('ok', message, found)
        else:
            checks[name] = _chk('fail', failure or 'expected %s, found %s' % (exp, found), found)
            mm.append({'item': item, 'check': name, 'expected': exp, 'found': found})
    return check


def evaluate_port(port, expected):
    """port: dict from the sysfs reader; returns checks {name: {severity, message, value}} and mismatches."""
    expected = expected or {}
    checks = {}
    mm = []
    check = _port_checker(port, checks, mm)

    if expected.get('state'):
        check('state', port.get('state_name') == str(expected['state']).upper(), str(expected['state']).upper(),
              port.get('state_name'), 'state %s' % port.get('state'))
    else:
        check('state', port.get('state_name') == 'ACTIVE', 'ACTIVE', port.get('state_name'),
              'state %s' % port.get('state'))
    if port.get('phys_state_name') is not None:
        check('phys_state', port.get('phys_state_name') == 'LinkUp', 'LinkUp', port.get('phys_state_name'),
              'phys_state %s' % port.get('phys_state'))
    if expected.get('link_layer'):
        check('link_layer', port.get('link_layer') == expected['link_layer'], expected['link_layer'],
              port.get('link_layer'), 'link layer %s' % port.get('link_layer'))
    if expected.get('min_rate_gbps') is not None:
        r = port.get('rate_gbps')
        check('rate', r is not None and r >= float(expected['min_rate_gbps']),
              '>= %s Gb/s' % expected['min_rate_gbps'], r, 'rate %s' % port.get('rate'))
    if expected.get('netdev_mtu') is not None:
        check('netdev_mtu', port.get('netdev_mtu') == int(expected['netdev_mtu']), int(expected['netdev_mtu']),
              port.get('netdev_mtu'), 'netdev %s MTU %s' % (port.get('netdev'), port.get('netdev_mtu')))
    if expected.get('active_mtu') is not None:
        check('active_mtu', port.get('active_mtu') == int(expected['active_mtu']), int(expected['active_mtu']),
              port.get('active_mtu'), 'active MTU %s (%s)' % (port.get('active_mtu'), port.get('active_mtu_source')))
    if expected.get('gid_index') is not None:
        check('gid', bool(port.get('gid')) and not port['gid'].startswith('0000:0000:0000:0000:0000:0000'),
              'a GID at index %s' % expected['gid_index'], port.get('gid'), 'GID %s' % port.get('gid'))
    if expected.get('gid_type'):
        check('gid_type', port.get('gid_type') == expected['gid_type'], expected['gid_type'],
              port.get('gid_type'), 'GID type %s' % port.get('gid_type'))
    return checks, mm


# expected key -> check name of the lossless-RoCE settings read with `mlnx_qos -i`
QOS_CHECKS = (('qos_trust', 'qos_trust'), ('pfc_priorities', 'pfc'))


def evaluate_qos(port, expected, qos=None, error=None):
    """The port netdev's trust and PFC against expected qos_trust / pfc_priorities: checks and mismatches as
    evaluate_port's. qos: parse_mlnx_qos's result; error: why it could not be read (every expected QoS check
    then fails with it)."""
    checks, mm = {}, []
    check = _port_checker(port, checks, mm)
    netdev = port.get('netdev')
    for key, name in QOS_CHECKS:
        if key not in expected:
            continue
        want = sorted(set(expected[key] or [])) if key == 'pfc_priorities' else expected[key]
        if error is not None:
            check(name, False, want, None, None, failure=error)
        elif key == 'qos_trust':
            message = 'mlnx_qos -i %s: trust %s' % (netdev, qos['trust'])
            check(name, qos['trust'] == want, want, qos['trust'], message, failure='%s, expected %s' % (message, want))
        else:
            found = [i for i, v in enumerate(qos['pfc']) if v]
            message = 'mlnx_qos -i %s: PFC on priorities %s' % (netdev, found or 'none')
            check(name, found == want, want, found, message, failure='%s, expected %s' % (message, want))
    return checks, mm


# --------------------------------------------------------------------------
# gpu_settings
# --------------------------------------------------------------------------

def desired_power(current, power_limit_watts=None, node_power_budget_watts=None):
    """Return {index: watts} (ints) or {} from the three ways of asking for a power limit."""
    if power_limit_watts is not None and node_power_budget_watts is not None:
        raise ValueError('power_limit_watts and node_power_budget_watts are mutually exclusive')
    idx = [g['index'] for g in current]
    if node_power_budget_watts is not None:
        if not idx:
            return {}
        each = int(node_power_budget_watts) // len(idx)
        return dict((i, each) for i in idx)
    if power_limit_watts is None:
        return {}
    if isinstance(power_limit_watts, dict):
        out = {}
        for k, v in power_limit_watts.items():
            try:
                i = int(str(k).replace('GPU', ''))
            except ValueError:
                raise ValueError('power_limit_watts key %r is not a GPU index' % (k,))
            if i not in idx:
                raise ValueError('power_limit_watts names GPU %d but the node has GPUs %s'
                                 % (i, ', '.join(str(x) for x in idx)))
            out[i] = int(v)
        return out
    return dict((i, int(power_limit_watts)) for i in idx)


def plan_settings(current, persistence_mode=None, power=None, application_clocks=None):
    """Compare current settings with the wanted ones.

    Returns (changes, errors, before, after): changes = list of {gpu, setting, before, after, argv_tail}.
    errors = out-of-range messages (nothing must be changed when errors is non-empty)."""
    power = power or {}
    changes, errors = [], []
    before, after = {}, {}
    for g in sorted(current, key=lambda x: x['index']):
        i = g['index']
        b = {'persistence_mode': g['persistence_mode'],
             'power_limit_watts': int(round(g['power_limit_w'])) if g['power_limit_w'] is not None else None,
             'application_clocks': {'memory_mhz': g['app_clock_memory_mhz'],
                                    'graphics_mhz': g['app_clock_graphics_mhz']}}
        a = {'persistence_mode': b['persistence_mode'], 'power_limit_watts': b['power_limit_watts'],
             'application_clocks': dict(b['application_clocks'])}
        if persistence_mode is not None and bool(g['persistence_mode']) != bool(persistence_mode):
            a['persistence_mode'] = bool(persistence_mode)
            changes.append({'gpu': i, 'setting': 'persistence_mode', 'before': g['persistence_mode'],
                            'after': bool(persistence_mode), 'args': ['-pm', '1' if persistence_mode else '0']})
        if i in power:
            w = int(power[i])
            lo, hi = g['power_min_w'], g['power_max_w']
            if lo is not None and hi is not None and not (int(round(lo)) <= w <= int(round(hi))):
                errors.append('GPU%d: power limit %d W outside %d-%d W' % (i, w, round(lo), round(hi)))
            elif b['power_limit_watts'] != w:
                a['power_limit_watts'] = w
                changes.append({'gpu': i, 'setting': 'power_limit_watts', 'before': b['power_limit_watts'],
                                'after': w, 'args': ['-pl', str(w)]})
        if application_clocks:
            mem = int(application_clocks['memory_mhz'])
            gfx = int(application_clocks['graphics_mhz'])
            if g['app_clock_memory_mhz'] is None and g['app_clock_graphics_mhz'] is None:
                errors.append('GPU%d: application clocks are not supported (nvidia-smi reports N/A)' % i)
            elif (g['app_clock_memory_mhz'], g['app_clock_graphics_mhz']) != (mem, gfx):
                a['application_clocks'] = {'memory_mhz': mem, 'graphics_mhz': gfx}
                changes.append({'gpu': i, 'setting': 'application_clocks', 'before': b['application_clocks'],
                                'after': a['application_clocks'], 'args': ['-ac', '%d,%d' % (mem, gfx)]})
        before['GPU%d' % i] = b
        after['GPU%d' % i] = a
    return changes, errors, before, after
