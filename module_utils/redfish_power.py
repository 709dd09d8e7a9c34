# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure functions over Redfish bodies (DMTF DSP0268) for the node power cap and cooling readings,
and over ipmitool DCMI output. Text/dicts in, dicts out; no I/O, so they are unit-tested directly."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re


class RedfishError(Exception):
    pass


def odata_id(body, key):
    """The @odata.id of a link property, or None."""
    link = (body or {}).get(key)
    if isinstance(link, dict):
        return link.get('@odata.id')
    return None


def chassis_members(collection):
    return [m.get('@odata.id') for m in (collection or {}).get('Members', []) if m.get('@odata.id')]


def power_control_limit(power):
    """PowerControl[0].PowerLimit.LimitInWatts of a Power resource: int watts, 0 when no cap (null)."""
    try:
        control = power['PowerControl'][0]
    except (KeyError, IndexError, TypeError):
        raise RedfishError('the Power resource has no PowerControl[0]')
    limit = (control.get('PowerLimit') or {}).get('LimitInWatts')
    return int(round(limit)) if limit is not None else 0


def control_limit(control):
    """SetPoint of a Control resource (ControlType Power): int watts, 0 when no cap (null or Disabled)."""
    if control.get('ControlType') not in (None, 'Power'):
        raise RedfishError('the control is of type %s, not Power' % control.get('ControlType'))
    if control.get('ControlMode') == 'Disabled' or control.get('SetPoint') is None:
        return 0
    return int(round(control['SetPoint']))


def power_control_patch(watts):
    return {'PowerControl': [{'PowerLimit': {'LimitInWatts': watts if watts else None}}]}


def control_patch(watts):
    if watts:
        return {'SetPoint': watts, 'ControlMode': 'Automatic'}
    return {'SetPoint': None, 'ControlMode': 'Disabled'}


def find_power_limit_control(members):
    """The first member of a ControlCollection (expanded bodies) with ControlType Power on the chassis."""
    for body in members:
        if body.get('ControlType') == 'Power' and body.get('PhysicalContext', 'Chassis') == 'Chassis':
            return body
    return None


def _health_bad(status):
    return (status or {}).get('Health') in ('Warning', 'Critical')


def cooling_summary(thermal=None, thermal_subsystem=None, leak_detection=None, leak_detectors=None):
    """Coolant inlet temperature and leak state from whatever the BMC offers.

    Returns {coolant_inlet_c: float|None, leak_detection: bool (a leak-detection resource exists),
    leak_detected: bool, leaks: [names], sources: [resource names read]}.
    """
    out = {'coolant_inlet_c': None, 'leak_detection': False, 'leak_detected': False, 'leaks': [], 'sources': []}
    if thermal_subsystem:
        out['sources'].append('ThermalSubsystem')
        reading = ((thermal_subsystem.get('Coolant') or {}).get('InletTemperatureCelsius') or {}).get('Reading')
        if reading is not None:
            out['coolant_inlet_c'] = float(reading)
        inline = thermal_subsystem.get('LeakDetection')
        if isinstance(inline, dict) and ('Status' in inline or 'LeakDetectorGroups' in inline):
            out['leak_detection'] = True
            for group in inline.get('LeakDetectorGroups') or []:
                if _health_bad(group.get('Status')):
                    out['leaks'].append(group.get('GroupName') or 'leak detector group')
            if not out['leaks'] and _health_bad(inline.get('Status')):
                out['leaks'].append('LeakDetection')
    if leak_detection:
        out['sources'].append('LeakDetection')
        out['leak_detection'] = True
        for group in leak_detection.get('LeakDetectorGroups') or []:
            if _health_bad(group.get('Status')) or group.get('DetectorState') in ('Warning', 'Critical'):
                name = group.get('GroupName') or 'leak detector group'
                if name not in out['leaks']:
                    out['leaks'].append(name)
    for det in leak_detectors or []:
        out['leak_detection'] = True
        if det.get('DetectorState') in ('Warning', 'Critical') or _health_bad(det.get('Status')):
            name = det.get('Name') or det.get('Id') or 'leak detector'
            if name not in out['leaks']:
                out['leaks'].append(name)
    if thermal:
        out['sources'].append('Thermal')
        if out['coolant_inlet_c'] is None:
            for temp in thermal.get('Temperatures') or []:
                if temp.get('PhysicalContext') == 'LiquidInlet' and temp.get('ReadingCelsius') is not None:
                    out['coolant_inlet_c'] = float(temp['ReadingCelsius'])
                    break
    out['leak_detected'] = bool(out['leaks'])
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
