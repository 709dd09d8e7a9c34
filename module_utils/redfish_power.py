# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure functions over Redfish bodies (DMTF DSP0268) for the node power cap and cooling readings,
and over ipmitool DCMI output. Text/dicts in, dicts out; no I/O, so they are unit-tested directly."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.module_utils.check_result import check


class RedfishError(Exception):
    pass


def odata_id(body, key):
    """The @odata.id of a link property, or None."""
    link = body.get(key) if isinstance(body, dict) else None
    if isinstance(link, dict) and isinstance(link.get('@odata.id'), str):
        return link['@odata.id']
    return None


def chassis_members(collection):
    """The @odata.id of every member of a collection; a Members that is not a list of links raises RedfishError."""
    members = collection.get('Members', []) if isinstance(collection, dict) else None
    if not isinstance(members, list):
        raise RedfishError('the collection\'s Members is %r, not a list' % (members,))
    return [m.get('@odata.id') for m in members if isinstance(m, dict) and isinstance(m.get('@odata.id'), str)]


def chassis_path(get, chassis_id=None):
    """The chassis to read: /redfish/v1/Chassis/<chassis_id>, or the first member of the collection."""
    if chassis_id:
        return '/redfish/v1/Chassis/%s' % chassis_id
    members = chassis_members(get('/redfish/v1/Chassis'))
    if not members:
        raise RedfishError('/redfish/v1/Chassis has no members')
    return members[0]


def _limit_watts(where, value):
    """A cap the BMC reports: 0 when null (no cap), else int watts; a string, a unit, a boolean, a negative, NaN
    or infinite value raises RedfishError naming the field (a cap that cannot be read is not "no cap")."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0 \
            or value == float('inf'):
        raise RedfishError('%s is %r, not a number of watts' % (where, value))
    return int(round(value))


def power_control_limit(power):
    """PowerControl[0].PowerLimit.LimitInWatts of a Power resource: int watts, 0 when no cap (null).

    Fails closed (RedfishError naming field and value): no PowerControl[0] object, a PowerControl[0] whose
    Status is not Enabled with a known Health, no PowerLimit object (iLO 6 and Supermicro X13 HGX keep the cap in
    OEM resources: redfish-notes.md section 6.2), or a LimitInWatts that is not null or a number of watts."""
    controls = power.get('PowerControl') if isinstance(power, dict) else None
    if not isinstance(controls, list) or not controls or not isinstance(controls[0], dict):
        raise RedfishError('the Power resource has no PowerControl[0] object (PowerControl is %r)'
                           % (controls if not isinstance(controls, list) else (controls[:1] or controls),))
    control = controls[0]
    problem = _status_problem('PowerControl[0]', control.get('Status'))
    if problem:
        raise RedfishError(problem)
    if 'PowerLimit' not in control:
        raise RedfishError('PowerControl[0] has no PowerLimit: this BMC does not hold a node cap in its Power '
                           'resource (the cap may live in an OEM resource)')
    limit = control['PowerLimit']
    if limit is None:
        return 0
    if not isinstance(limit, dict) or 'LimitInWatts' not in limit:
        raise RedfishError('PowerControl[0].PowerLimit is %r, not an object with LimitInWatts' % (limit,))
    return _limit_watts('PowerControl[0].PowerLimit.LimitInWatts', limit['LimitInWatts'])


# ControlMode values (DMTF Control): every one but Disabled applies the SetPoint (redfish-notes.md).
_CONTROL_MODES = ('Automatic', 'Override', 'Manual', 'Disabled')
# SetPointUnits: UCUM "W" (DMTF), "Watt" (Lenovo XCC); a percent (BlueField) or anything else is not watts.
_WATT_UNITS = ('W', 'Watt')


def control_limit(control):
    """SetPoint of a Control resource (ControlType Power): int watts, 0 when no cap (ControlMode Disabled, or
    SetPoint null).

    Fails closed (RedfishError naming field and value): not an object, another ControlType, a ControlMode outside
    DMTF's four, SetPointUnits other than watts, a Status not Enabled with a known Health while the cap applies, or
    a SetPoint that is not null or a number of watts."""
    if not isinstance(control, dict):
        raise RedfishError('the power limit Control is %r, not an object' % (control,))
    if control.get('ControlType') not in (None, 'Power'):
        raise RedfishError('the control is of type %r, not Power' % (control.get('ControlType'),))
    mode = control.get('ControlMode')
    if mode is not None and mode not in _CONTROL_MODES:
        raise RedfishError('the Control\'s ControlMode is %r, not one of %s' % (mode, ', '.join(_CONTROL_MODES)))
    if mode == 'Disabled':
        return 0
    units = control.get('SetPointUnits')
    if units is not None and units not in _WATT_UNITS:
        raise RedfishError('the Control\'s SetPointUnits is %r, not watts' % (units,))
    problem = _status_problem('the Control', control.get('Status'))
    if problem:
        raise RedfishError(problem)
    if 'SetPoint' not in control:
        raise RedfishError('the Control has no SetPoint while its ControlMode is %r' % (mode,))
    return _limit_watts('the Control\'s SetPoint', control['SetPoint'])


def power_control_patch(watts):
    return {'PowerControl': [{'PowerLimit': {'LimitInWatts': watts if watts else None}}]}


def control_patch(watts):
    if watts:
        return {'SetPoint': watts, 'ControlMode': 'Automatic'}
    return {'SetPoint': None, 'ControlMode': 'Disabled'}


def _bound(where, value):
    """A range bound the BMC reports: None when absent or null, a number of watts, else RedfishError (a bound that
    cannot be read is not a bound that can be ignored)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        raise RedfishError('%s is %r, not a number of watts' % (where, value))
    return value


def limit_range(body, interface):
    """The range of node caps the BMC reports next to the cap it holds: {min, max, sources} (min or max None when
    only the other is reported), or None when it reports none (../shared/fixtures/redfish-notes.md, section 6.9).

    controls: the Control's AllowableMin/AllowableMax (DMTF Control, read-only), or HPE Cray's non-DMTF
    SettingRangeMin/SettingRangeMax. power: PowerControl[0].PowerCapacityWatts (the most the chassis can be
    allocated) as the maximum; HPE iLO's Oem.Hpe.MinimumSafelyAchievableCap (when
    MinimumSafelyAchievableCapValid) and Lenovo XCC's PowerControl[0].Oem.Lenovo.PowerUtilization MinLimitInWatts,
    MaxLimitInWatts and CapacityMinAC (the real floor behind a MinLimitInWatts of 0). Of several minimums the highest
    counts, of several maximums the lowest. A bound that is present but not a number, or a minimum above the
    maximum, raises RedfishError naming the field."""
    body = _dict(body)
    lows, highs = [], []

    def add(bounds, where, value):
        value = _bound(where, value)
        if value is not None:
            bounds.append((value, where))

    if interface == 'controls':
        if 'AllowableMin' in body or 'AllowableMax' in body:
            add(lows, 'AllowableMin', body.get('AllowableMin'))
            add(highs, 'AllowableMax', body.get('AllowableMax'))
        else:
            add(lows, 'SettingRangeMin', body.get('SettingRangeMin'))
            add(highs, 'SettingRangeMax', body.get('SettingRangeMax'))
    else:
        control = _dict((_list(body.get('PowerControl')) or [None])[0])
        add(highs, 'PowerControl[0].PowerCapacityWatts', control.get('PowerCapacityWatts'))
        hpe = _dict(_dict(body.get('Oem')).get('Hpe'))
        if hpe.get('MinimumSafelyAchievableCapValid') is True:
            add(lows, 'Oem.Hpe.MinimumSafelyAchievableCap', hpe.get('MinimumSafelyAchievableCap'))
        lenovo = _dict(_dict(_dict(control.get('Oem')).get('Lenovo')).get('PowerUtilization'))
        where = 'PowerControl[0].Oem.Lenovo.PowerUtilization.'
        add(lows, where + 'MinLimitInWatts', lenovo.get('MinLimitInWatts'))
        add(lows, where + 'CapacityMinAC', lenovo.get('CapacityMinAC'))
        add(highs, where + 'MaxLimitInWatts', lenovo.get('MaxLimitInWatts'))
    if not lows and not highs:
        return None
    low, high = max(lows) if lows else (None, None), min(highs) if highs else (None, None)
    if low[0] is not None and high[0] is not None and low[0] > high[0]:
        raise RedfishError('the reported cap range is empty: %s %r is above %s %r' % (low[1], low[0], high[1], high[0]))
    return {'min': low[0], 'max': high[0], 'sources': [w for _v, w in lows + highs]}


def outside_range(watts, rng):
    """Why a cap of watts is outside the range limit_range found, or None when it is inside (or no range)."""
    if not rng or not watts:
        return None
    if rng['min'] is not None and watts < rng['min']:
        return 'below the %s W minimum' % _fmt(rng['min'])
    if rng['max'] is not None and watts > rng['max']:
        return 'above the %s W maximum' % _fmt(rng['max'])
    return None


def range_text(rng):
    """'1600-5600 W', 'up to 5600 W' or 'at least 675 W', with the fields it comes from."""
    low, high = rng['min'], rng['max']
    text = ('%s-%s W' % (_fmt(low), _fmt(high)) if low is not None and high is not None
            else 'up to %s W' % _fmt(high) if high is not None else 'at least %s W' % _fmt(low))
    return '%s (%s)' % (text, ', '.join(rng['sources']))


def _fmt(watts):
    return ('%d' % watts) if float(watts).is_integer() else ('%g' % watts)


def find_power_limit_control(members):
    """The first member of a ControlCollection (expanded bodies) with ControlType Power on the chassis."""
    for body in members:
        if isinstance(body, dict) and body.get('ControlType') == 'Power' \
                and body.get('PhysicalContext', 'Chassis') == 'Chassis':
            return body
    return None


_DETECTOR_STATES = ('OK', 'Warning', 'Critical')
_HEALTH = ('OK', 'Warning', 'Critical')
# Coolant a BMC can report; anything outside is a sensor fault or a unit mix-up (Fahrenheit, millidegrees).
COOLANT_RANGE_C = (-10.0, 100.0)


def _dict(value):
    return value if isinstance(value, dict) else {}


def _list(value):
    return value if isinstance(value, list) else []


def _health_bad(status):
    return _dict(status).get('Health') in ('Warning', 'Critical')


def _status_problem(where, status, required=False):
    """A reason when a Status is present but not Enabled with a known Health (or absent when required)."""
    if status is None:
        return '%s: no Status' % where if required else None
    if not isinstance(status, dict):
        return '%s: Status is %r, not an object' % (where, status)
    state, health = status.get('State'), status.get('Health')
    if state is not None and state != 'Enabled':
        return '%s: Status.State is %r, not Enabled' % (where, state)
    if health is not None and health not in _HEALTH:
        return '%s: Status.Health is %r' % (where, health)
    return None


def _celsius(where, value):
    """(reading, problem): a coolant temperature must be a number within COOLANT_RANGE_C."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, '%s is %r, not a number' % (where, value)
    if value != value or not COOLANT_RANGE_C[0] <= value <= COOLANT_RANGE_C[1]:
        return None, '%s is %r, outside %g..%g C' % ((where, value) + COOLANT_RANGE_C)
    return float(value), None


def cooling_summary(thermal=None, thermal_subsystem=None, leak_detection=None, leak_detectors=None):
    """Coolant inlet temperature and leak state from whatever the BMC offers.

    Returns {coolant_inlet_c: float|None, coolant_outlet_c: float|None (ThermalSubsystem's Coolant only),
    leak_detection: bool (a leak-detection resource exists),
    leak_detected: bool, leaks: [names], sources: [resource names read], problems: [reasons]}.

    Fails closed: a reading that is null, a string or out of range, a sensor or detector that is not
    Enabled, or a detector state other than OK/Warning/Critical is a problem naming the resource, the
    field and the value (never a healthy reading), and a detector in Warning or Critical is a leak whatever
    a group or summary Status says.
    """
    out = {'coolant_inlet_c': None, 'coolant_outlet_c': None, 'leak_detection': False, 'leak_detected': False,
           'leaks': [], 'sources': [], 'problems': []}
    problems = out['problems']

    def leak(name):
        if name not in out['leaks']:
            out['leaks'].append(name)

    def detector(where, name, det):
        det = _dict(det)
        state = det.get('DetectorState')
        if state in ('Warning', 'Critical'):
            leak(name)
        elif state != 'OK':
            problems.append('%s: DetectorState is %r' % (where, state))
        if _health_bad(det.get('Status')):
            leak(name)
        problem = _status_problem(where, det.get('Status'))
        if problem:
            problems.append(problem)

    def groups(where, body):
        for n, group in enumerate(_list(_dict(body).get('LeakDetectorGroups'))):
            group = _dict(group)
            name = group.get('GroupName') or 'leak detector group %d' % n
            gwhere = '%s LeakDetectorGroups[%d]' % (where, n)
            if _health_bad(group.get('Status')):
                leak(name)
            problem = _status_problem(gwhere, group.get('Status'))
            if problem:
                problems.append(problem)
            for k, det in enumerate(_list(group.get('Detectors'))):
                detector('%s Detectors[%d]' % (gwhere, k), name, det)

    if thermal_subsystem is not None and not isinstance(thermal_subsystem, dict):
        problems.append('ThermalSubsystem is %r, not an object' % (thermal_subsystem,))
    elif thermal_subsystem:
        out['sources'].append('ThermalSubsystem')
        coolant = thermal_subsystem.get('Coolant')
        if coolant is not None:
            for key, field in (('coolant_inlet_c', 'InletTemperatureCelsius'),
                               ('coolant_outlet_c', 'OutletTemperatureCelsius')):
                sensor = _dict(coolant).get(field)
                if sensor is not None:
                    out[key], problem = _celsius('ThermalSubsystem Coolant.%s.Reading' % field,
                                                 _dict(sensor).get('Reading'))
                    if problem:
                        problems.append(problem)
        inline = thermal_subsystem.get('LeakDetection')
        if isinstance(inline, dict) and ('Status' in inline or 'LeakDetectorGroups' in inline):
            out['leak_detection'] = True
            groups('ThermalSubsystem LeakDetection', inline)
            if _health_bad(inline.get('Status')) and not out['leaks']:
                leak('LeakDetection')
            problem = _status_problem('ThermalSubsystem LeakDetection', inline.get('Status'))
            if problem:
                problems.append(problem)
    if leak_detection is not None:
        out['sources'].append('LeakDetection')
        out['leak_detection'] = True
        if not isinstance(leak_detection, dict):
            problems.append('LeakDetection is %r, not an object' % (leak_detection,))
        else:
            groups('LeakDetection', leak_detection)
            problem = _status_problem('LeakDetection', leak_detection.get('Status'))
            if problem:
                problems.append(problem)
    for n, det in enumerate(_list(leak_detectors)):
        out['leak_detection'] = True
        det = _dict(det)
        name = det.get('Name') or det.get('Id') or 'leak detector %d' % n
        detector('LeakDetector %s' % (det.get('Id') or n), name, det)
    if thermal is not None and not isinstance(thermal, dict):
        problems.append('Thermal is %r, not an object' % (thermal,))
    elif thermal:
        out['sources'].append('Thermal')
        for n, temp in enumerate(_list(thermal.get('Temperatures'))):
            temp = _dict(temp)
            if temp.get('PhysicalContext') != 'LiquidInlet':
                continue
            where = 'Thermal Temperatures[%d] (%s)' % (n, temp.get('Name') or 'LiquidInlet')
            problem = _status_problem(where, temp.get('Status'))
            reading, bad = _celsius(where + ' ReadingCelsius', temp.get('ReadingCelsius'))
            if problem or bad:
                problems.extend(p for p in (problem, bad) if p)
            elif out['coolant_inlet_c'] is None:
                out['coolant_inlet_c'] = reading
    out['leak_detected'] = bool(out['leaks'])
    return out


def read_cooling(get, chassis):
    """cooling_summary of a chassis, reading what it links (Thermal, ThermalSubsystem, its LeakDetection and
    LeakDetectors) through get(path) -> body."""
    subsystem = leak = None
    detectors = []
    thermal = get(odata_id(chassis, 'Thermal')) if odata_id(chassis, 'Thermal') else None
    if odata_id(chassis, 'ThermalSubsystem'):
        subsystem = get(odata_id(chassis, 'ThermalSubsystem'))
        leak_path = odata_id(subsystem, 'LeakDetection')
        if leak_path:
            leak = get(leak_path)
            if odata_id(leak, 'LeakDetectors'):
                detectors = [get(m) for m in chassis_members(get(odata_id(leak, 'LeakDetectors')))]
    return cooling_summary(thermal, subsystem, leak, detectors)


def _watts(where, value, problems):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        problems.append('%s is %r, not a power in watts' % (where, value))
        return None
    return float(value)


def power_summary(power=None, environment=None):
    """Node power draw and PSU redundancy from the chassis' Power resource or, without one, its
    EnvironmentMetrics (../shared/fixtures/redfish-notes.md: iDRAC/iLO/XCC/Supermicro report
    Power.PowerControl[0].PowerConsumedWatts, OpenBMC and GB200/GB300 trays EnvironmentMetrics.PowerWatts).

    Returns {consumed_watts: float|None, psu_redundancy_ok: bool|None (None: the BMC reports no redundancy),
    psus: [{name, health}], problems: [reasons]}. Fails closed: a reading that is absent, null or not a number
    and a PSU or redundancy set that is not Enabled/OK is a problem naming the field, never a healthy value."""
    out = {'consumed_watts': None, 'psu_redundancy_ok': None, 'psus': [], 'problems': []}
    problems = out['problems']
    if power is not None and not isinstance(power, dict):
        problems.append('Power is %r, not an object' % (power,))
        power = None
    if power:
        controls = _list(power.get('PowerControl'))
        if controls:
            out['consumed_watts'] = _watts('Power PowerControl[0].PowerConsumedWatts',
                                           _dict(controls[0]).get('PowerConsumedWatts'), problems)
        elif environment is None:
            problems.append('Power has no PowerControl to read the draw from')
        redundant = True
        seen = False
        for n, red in enumerate(_list(power.get('Redundancy'))):
            seen = True
            where = 'Power Redundancy[%d]' % n
            status = _dict(_dict(red).get('Status'))
            problem = _status_problem(where, _dict(red).get('Status'), required=True)
            if problem:
                problems.append(problem)
            if status.get('Health') != 'OK':
                redundant = False
        for n, psu in enumerate(_list(power.get('PowerSupplies'))):
            psu = _dict(psu)
            where = 'Power PowerSupplies[%d]' % n
            status = _dict(psu.get('Status'))
            name = psu.get('Name') or psu.get('MemberId') or 'PSU %d' % n
            out['psus'].append({'name': name, 'health': status.get('Health'), 'state': status.get('State')})
            if status.get('State') == 'Absent':
                continue
            problem = _status_problem(where, psu.get('Status'), required=True)
            if problem:
                problems.append(problem)
            if status.get('Health') != 'OK':
                redundant = False
        if seen:
            out['psu_redundancy_ok'] = redundant
    if out['consumed_watts'] is None and environment is not None:
        if not isinstance(environment, dict):
            problems.append('EnvironmentMetrics is %r, not an object' % (environment,))
        else:
            out['consumed_watts'] = _watts('EnvironmentMetrics PowerWatts.Reading',
                                           _dict(environment.get('PowerWatts')).get('Reading'), problems)
    if power is None and environment is None:
        problems.append('the chassis links neither Power nor EnvironmentMetrics: no power reading')
    return out


def cooling_checks(summary):
    """cooling_summary's findings in the one result format (module_utils/check_result.py)."""
    out = [check('reading', 'bmc', 'fail', None, 'a readable, enabled sensor', problem)
           for problem in summary['problems']]
    for name in summary['leaks']:
        out.append(check('leak', name, 'fail', 'leak', 'no leak', 'leak detected by %s' % name))
    if not summary['leak_detection']:
        out.append(check('leak', 'leak detection', 'warn', None, 'no leak',
                         'the BMC exposes no leak detection (read: %s)' % (', '.join(summary['sources']) or 'nothing')))
    elif not summary['leaks']:
        out.append(check('leak', 'leak detection', 'ok', 'no leak', 'no leak', 'every leak detector OK'))
    inlet = summary['coolant_inlet_c']
    out.append(check('coolant_inlet_c', 'coolant', 'ok' if inlet is not None else 'warn', inlet, None,
                     'coolant inlet %.1f C' % inlet if inlet is not None else 'the BMC reports no coolant inlet '
                     'temperature'))
    return out


_DCMI_LIMIT = re.compile(r'Power Limit:\s*(\d+)\s*Watts', re.I)
_DCMI_ACTIVE = re.compile(r'Current Limit State:\s*(.+)', re.I)


def parse_dcmi_limit(text):
    """ipmitool dcmi power get_limit: {limit_watts: int, active: bool}; 0 watts when no limit is active."""
    match = _DCMI_LIMIT.search(text or '')
    active = _DCMI_ACTIVE.search(text or '')
    if not match:
        if 'No Active Set Power Limit' in (text or ''):
            return {'limit_watts': 0, 'active': False}
        raise RedfishError('no "Power Limit: <n> Watts" line in ipmitool dcmi power get_limit output')
    is_active = bool(active) and 'no active' not in active.group(1).lower() and 'not' not in active.group(1).lower()
    return {'limit_watts': int(match.group(1)) if is_active else 0, 'active': is_active,
            'configured_watts': int(match.group(1))}
