#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: redfish_power
short_description: Set and read back a node's power cap through its BMC (Redfish, IPMI DCMI fallback)
description:
  - Reads the node power cap from the BMC and, when O(limit_watts) is given and differs, sets it and
    reads it back; a read-back value other than the one written fails the task.
  - "Redfish (DMTF DSP0268): the newer Controls schema (C(/redfish/v1/Chassis/<id>/Controls), the member
    with C(ControlType) V(Power), property C(SetPoint)) or the Power schema
    (C(/redfish/v1/Chassis/<id>/Power), C(PowerControl[0].PowerLimit.LimitInWatts)). O(interface=auto)
    uses Controls when the chassis links it, else Power."
  - Authenticates with HTTP Basic or a Redfish session (C(POST /redfish/v1/SessionService/Sessions), then
    C(X-Auth-Token); the session is deleted at the end). Credentials are never returned or printed;
    rejected credentials fail with a message naming the BMC only.
  - With O(read_cooling=true) also reads the coolant inlet temperature and the leak detectors from
    C(ThermalSubsystem) (and its C(LeakDetection) resource and C(LeakDetectors) collection where present)
    or C(Thermal) on older BMCs. Reading is never a change.
  - "Refuses, before any write and in check mode too, a cap outside the range the BMC reports next to the cap:
    the Control's C(AllowableMin)/C(AllowableMax) (HPE Cray C(SettingRangeMin)/C(SettingRangeMax)), or for the
    Power schema C(PowerControl[0].PowerCapacityWatts) with HPE iLO's C(Oem.Hpe.MinimumSafelyAchievableCap) and
    Lenovo XCC's C(Oem.Lenovo.PowerUtilization) limits (see RV(limit_range)). The task fails naming the BMC, the
    cap and the range; V(0) (no cap) is never refused. A BMC that reports no range (Dell iDRAC and most HPE iLO
    C(PowerLimit)s, IPMI DCMI) gives the module nothing to hold the cap against: it writes it, and the BMC's own
    answer decides. The cap's floor (the node's GPUs and the rest of it) is checked by preflight before any run
    reaches a BMC. A range bound that is present but not a number fails the task (fail closed)."
  - O(protocol=ipmi) uses C(ipmitool -I lanplus ... dcmi power get_limit/set_limit/activate), with the
    password passed in the environment (C(ipmitool -E)), never on the command line; it reads no cooling and no
    range.
  - "Fails closed on the cap it reads, naming the BMC, the field and the value: a C(PowerControl) that is not an
    array of objects, a C(PowerControl[0]) without C(PowerLimit) (HPE iLO 6 and Supermicro X13 HGX keep the cap in
    OEM resources), a C(LimitInWatts) or C(SetPoint) that is not null or a non-negative number (a string, a unit,
    a boolean), a C(SetPointUnits) other than watts (BlueField's percent), a C(ControlMode) outside DMTF's four,
    or a C(Status) of the resource holding the cap that is not C(Enabled) with a known C(Health). Null and
    C(ControlMode) V(Disabled) read as no cap (V(0)). Any other answer it cannot account for fails the task
    naming the BMC, never with a traceback."
  - In check mode reads everything and reports what would change without writing.
version_added: "1.0.0"
author:
  - GPU cluster toolkit maintainers
options:
  address:
    description: BMC address (IP or name) reachable from where the module runs.
    type: str
    required: true
  port:
    description: Redfish HTTPS port.
    type: int
    default: 443
  protocol:
    description: V(redfish) or the V(ipmi) DCMI fallback for BMCs without Redfish power control.
    type: str
    choices: [redfish, ipmi]
    default: redfish
  username:
    description: BMC user (from a vault or an AWX credential).
    type: str
    required: true
  password:
    description: BMC password (from a vault or an AWX credential). Never printed.
    type: str
    required: true
  auth:
    description: V(session) (Redfish session, X-Auth-Token) or V(basic) (HTTP Basic on every request).
    type: str
    choices: [session, basic]
    default: session
  validate_certs:
    description: Verify the BMC's TLS certificate.
    type: bool
    default: true
  ca_path:
    description: CA bundle (PEM) to verify the BMC's certificate with.
    type: path
  chassis_id:
    description: Chassis to cap. Default is the first member of C(/redfish/v1/Chassis).
    type: str
  limit_watts:
    description:
      - Wanted node power cap in watts; V(0) removes the cap. Unset only reads.
    type: int
  interface:
    description: Redfish schema to use for the cap.
    type: str
    choices: [auto, controls, power]
    default: auto
  read_cooling:
    description: Also read coolant inlet temperature and leak detection (Redfish only).
    type: bool
    default: true
  timeout:
    description: Seconds per HTTP request or ipmitool call.
    type: int
    default: 30
  ipmitool_path:
    description: Path to ipmitool for O(protocol=ipmi). Default is to search C(PATH).
    type: path
notes:
  - Supports check mode. Run it where the BMC network is reachable (usually C(delegate_to) the controller).
requirements:
  - A Redfish 1.x service, or ipmitool for O(protocol=ipmi)
seealso:
  - module: gpu_settings
'''

EXAMPLES = r'''
- name: Cap the node at 6 kW and read it back
  redfish_power:
    address: 10.0.0.11
    username: "{{ bmc_username }}"
    password: "{{ bmc_password }}"
    ca_path: /etc/pki/bmc-ca.pem
    limit_watts: 6000
  delegate_to: localhost
  no_log: true

- name: Read the cap and the cooling state only
  redfish_power:
    address: 10.0.0.11
    username: "{{ bmc_username }}"
    password: "{{ bmc_password }}"
    validate_certs: false
  delegate_to: localhost
  register: bmc

- name: Cap through IPMI DCMI on an old BMC
  redfish_power:
    address: 10.0.0.12
    protocol: ipmi
    username: "{{ bmc_username }}"
    password: "{{ bmc_password }}"
    limit_watts: 5500
  delegate_to: localhost
  no_log: true
'''

RETURN = r'''
---
checks:
  description:
    - Every check, in the one result format of the toolkit's check modules (docs/DESIGN.md, "Check results").
    - "V(power_limit) (subject the resource: the cap read back, expected O(limit_watts)); with O(read_cooling): a fail V(reading) (subject V(bmc)) per document the module could not account for (see RV(cooling.problems)), a fail V(leak) per detector reporting a leak, V(leak) ok (or warn when the BMC exposes no leak detection), and V(coolant_inlet_c) (warn when not reported)."
  returned: on success
  type: list
  elements: dict
  contains:
    name: {description: Check name., type: str}
    subject: {description: "What was checked (V(/redfish/v1/Chassis/1/Controls/NodePowerLimit), V(bmc), V(coolant), a detector name).", type: str}
    status: {description: V(ok), V(warn) or V(fail)., type: str}
    measured: {description: The value read (any type)., type: raw}
    expected: {description: What it was compared against (any type; null when nothing was expected)., type: raw}
    reason: {description: Why the status, naming the tool field and value where one is at fault., type: str}
verdict:
  description: The worst status in RV(checks) (V(fail) when there is none).
  returned: on success
  type: str
  sample: ok
limit_watts:
  description: The node cap read back from the BMC after the run (0 = no cap).
  returned: always
  type: int
  sample: 6000
before_watts:
  description: The node cap read before any change (0 = no cap).
  returned: always
  type: int
  sample: 0
interface:
  description: What the cap was read and written through (V(controls), V(power) or V(ipmi)).
  returned: always
  type: str
  sample: controls
resource:
  description: The Redfish resource path of the cap (or V(dcmi) for IPMI).
  returned: always
  type: str
  sample: /redfish/v1/Chassis/1/Controls/PowerLimit
limit_range:
  description:
    - The range of node caps the BMC reports next to the cap (O(limit_watts) outside it is refused); null when the
      BMC reports none. V(min) or V(max) is null when only the other is reported.
  returned: when protocol is redfish and the cap resource was read
  type: dict
  contains:
    min: {description: The lowest cap the BMC reports (the highest of several reported minimums)., type: float}
    max: {description: The highest cap the BMC reports (the lowest of several reported maximums)., type: float}
    sources:
      description: The fields the bounds come from (V(AllowableMin), V(PowerControl[0].PowerCapacityWatts)...).
      type: list
      elements: str
  sample: {min: 0, max: 10200, sources: [AllowableMin, AllowableMax]}
chassis:
  description: The chassis resource path used.
  returned: when protocol is redfish
  type: str
  sample: /redfish/v1/Chassis/1
cooling:
  description: Coolant inlet temperature and leak detection as the BMC reports them.
  returned: when protocol is redfish and read_cooling is true
  type: dict
  contains:
    coolant_inlet_c:
      description: Coolant inlet temperature in Celsius, null when the BMC reports none (air-cooled).
      type: float
    leak_detection:
      description: Whether the BMC has a leak-detection resource.
      type: bool
    leak_detected:
      description: Whether any leak detector reports Warning or Critical.
      type: bool
    leaks:
      description: Names of the detectors or groups that report a leak.
      type: list
      elements: str
    sources:
      description: Redfish resources read.
      type: list
      elements: str
    problems:
      description:
        - Readings that cannot be accounted for, each naming the resource, the field and the value
          (a null, a string or a number with its unit where a number belongs, a coolant temperature outside
          -10..100 C, a sensor or detector whose Status.State is not Enabled, a DetectorState other than
          OK/Warning/Critical). Empty when every reading is usable; the bmc_power role fails otherwise.
      type: list
      elements: str
  sample: {coolant_inlet_c: 32.0, leak_detection: true, leak_detected: false, leaks: [], sources: [ThermalSubsystem],
           problems: []}
diff:
  description: Ansible diff of the cap.
  returned: always
  type: dict
  sample: {before: {limit_watts: 0}, after: {limit_watts: 6000}}
'''

import json

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.check_result import check, verdict
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.urls import open_url
from ansible.module_utils.redfish_power import (
    RedfishError, chassis_members, chassis_path, control_limit, control_patch, cooling_checks,
    find_power_limit_control, limit_range, odata_id, outside_range, parse_dcmi_limit, power_control_limit,
    power_control_patch, range_text, read_cooling)


class BmcFailure(Exception):
    pass


class Redfish(object):
    """A tiny Redfish client on open_url. Messages never contain the credentials."""

    def __init__(self, module):
        p = module.params
        self.module = module
        self.base = 'https://%s:%d' % (p['address'], p['port'])
        self.token = None
        self.session_uri = None

    def _open(self, method, path, body=None, auth=True):
        p = self.module.params
        headers = {'Accept': 'application/json', 'OData-Version': '4.0'}
        kwargs = {}
        if body is not None:
            headers['Content-Type'] = 'application/json'
        if auth and self.token:
            headers['X-Auth-Token'] = self.token
        elif auth:
            kwargs = {'url_username': p['username'], 'url_password': p['password'], 'force_basic_auth': True}
        try:
            resp = open_url(self.base + path, method=method, headers=headers,
                            data=json.dumps(body) if body is not None else None,
                            validate_certs=p['validate_certs'], ca_path=p['ca_path'], timeout=p['timeout'],
                            follow_redirects='none', **kwargs)
            raw = resp.read()
            return resp, (json.loads(raw) if raw else {})
        except HTTPError as err:
            try:
                detail = json.loads(err.read() or b'{}').get('error', {})
                code = detail.get('code') or ''
                text = detail.get('message') or ''
            except (ValueError, AttributeError):
                code, text = '', ''
            if err.code == 401:
                raise BmcFailure('BMC %s refused the credentials (HTTP 401 %s on %s %s): check bmc_username and '
                                 'bmc_password for this host' % (self.base, code, method, path))
            raise BmcFailure('BMC %s: %s %s answered HTTP %d %s %s' % (self.base, method, path, err.code, code, text))
        except URLError as err:
            raise BmcFailure('BMC %s: %s %s failed: %s' % (self.base, method, path, to_native(err.reason)))
        except (ValueError, OSError) as err:
            raise BmcFailure('BMC %s: %s %s failed: %s' % (self.base, method, path, to_native(err)))

    def get(self, path):
        return self._open('GET', path)[1]

    def patch(self, path, body):
        return self._open('PATCH', path, body)[1]

    def login(self):
        if self.module.params['auth'] != 'session':
            return
        root = self._open('GET', '/redfish/v1', auth=False)[1]
        sessions = ((root.get('Links') or {}).get('Sessions') or {}).get('@odata.id') \
            or '/redfish/v1/SessionService/Sessions'
        p = self.module.params
        resp, body = self._open('POST', sessions, {'UserName': p['username'], 'Password': p['password']}, auth=False)
        self.token = resp.headers.get('X-Auth-Token')
        self.session_uri = resp.headers.get('Location') or body.get('@odata.id')
        if not self.token:
            raise BmcFailure('BMC %s: the session service returned no X-Auth-Token' % self.base)

    def logout(self):
        if self.token and self.session_uri:
            path = self.session_uri
            if path.startswith('http'):
                path = '/' + path.split('/', 3)[3]
            try:
                self._open('DELETE', path)
            except BmcFailure:
                pass
            self.token = None


def _redfish(module):
    p = module.params
    client = Redfish(module)
    result = {'changed': False, 'interface': None}
    client.login()
    try:
        path = chassis_path(client.get, p['chassis_id'])
        chassis = client.get(path)
        result['chassis'] = path
        controls_path, power_path = odata_id(chassis, 'Controls'), odata_id(chassis, 'Power')
        control = None
        if p['interface'] in ('auto', 'controls') and controls_path:
            collection = client.get(controls_path)
            control = find_power_limit_control([client.get(m) for m in chassis_members(collection)])
        if control is not None:
            if not isinstance(control.get('@odata.id'), str):
                raise RedfishError('the power limit Control has no @odata.id (%r)' % (control.get('@odata.id'),))
            result['interface'], result['resource'] = 'controls', control['@odata.id']
            read, patch = control_limit, control_patch
        elif p['interface'] in ('auto', 'power') and power_path:
            result['interface'], result['resource'] = 'power', power_path
            read, patch = power_control_limit, power_control_patch
        else:
            raise BmcFailure('BMC %s: chassis %s offers no %s power limit' % (
                client.base, path, 'Controls' if p['interface'] == 'controls' else 'Controls or Power'))
        resource = result['resource'].split('#', 1)[0]
        body = client.get(resource)
        before = read(body)
        result['before_watts'] = result['limit_watts'] = before
        result['limit_range'] = limit_range(body, result['interface'])
        want = p['limit_watts']
        if want is not None and want != before:
            # The second guard after preflight: never write a cap the BMC itself says it cannot hold. Without a
            # reported range there is nothing to hold the cap against here (preflight's floor still applies).
            outside = outside_range(want, result['limit_range'])
            if outside:
                raise BmcFailure('BMC %s: refusing to write a node cap of %d W to %s: it is %s of the range the BMC '
                                 'reports, %s; nothing was written' % (client.base, want, resource, outside,
                                                                      range_text(result['limit_range'])))
            result['changed'] = True
            if not module.check_mode:
                client.patch(resource, patch(want))
                after = read(client.get(resource))
                if after != want:
                    raise BmcFailure('BMC %s: wrote a cap of %d W to %s but reads back %d W'
                                     % (client.base, want, resource, after))
            result['limit_watts'] = want
        if p['read_cooling']:
            result['cooling'] = read_cooling(client.get, chassis)
    except RedfishError as err:
        raise BmcFailure('BMC %s: %s' % (client.base, err))
    finally:
        client.logout()
    return result


def _ipmi(module):
    p = module.params
    tool = p['ipmitool_path'] or module.get_bin_path('ipmitool', required=True)
    base = [tool, '-I', 'lanplus', '-H', p['address'], '-U', p['username'], '-E', '-N', str(p['timeout'])]
    env = {'IPMI_PASSWORD': p['password']}

    def run(args):
        rc, out, err = module.run_command(base + args, environ_update=env)
        if rc != 0:
            msg = (err or out).strip()[:300]
            if 'password' in msg.lower() or 'unauthorized' in msg.lower() or 'rakp' in msg.lower():
                raise BmcFailure('BMC %s refused the IPMI credentials (ipmitool rc=%d): check bmc_username and '
                                 'bmc_password for this host' % (p['address'], rc))
            raise BmcFailure('BMC %s: ipmitool %s failed (rc=%d): %s' % (p['address'], ' '.join(args), rc, msg))
        return out

    result = {'changed': False, 'interface': 'ipmi', 'resource': 'dcmi'}
    try:
        before = parse_dcmi_limit(run(['dcmi', 'power', 'get_limit']))['limit_watts']
    except RedfishError as err:
        raise BmcFailure('BMC %s: %s' % (p['address'], err))
    result['before_watts'] = result['limit_watts'] = before
    want = p['limit_watts']
    if want is not None and want != before:
        result['changed'] = True
        if not module.check_mode:
            if want:
                run(['dcmi', 'power', 'set_limit', 'limit', str(want)])
                run(['dcmi', 'power', 'activate'])
            else:
                run(['dcmi', 'power', 'deactivate'])
            after = parse_dcmi_limit(run(['dcmi', 'power', 'get_limit']))['limit_watts']
            if after != want:
                raise BmcFailure('BMC %s: set a DCMI cap of %d W but reads back %d W' % (p['address'], want, after))
        result['limit_watts'] = want
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            address=dict(type='str', required=True),
            port=dict(type='int', default=443),
            protocol=dict(type='str', choices=['redfish', 'ipmi'], default='redfish'),
            username=dict(type='str', required=True, no_log=True),
            password=dict(type='str', required=True, no_log=True),
            auth=dict(type='str', choices=['session', 'basic'], default='session'),
            validate_certs=dict(type='bool', default=True),
            ca_path=dict(type='path'),
            chassis_id=dict(type='str'),
            limit_watts=dict(type='int'),
            interface=dict(type='str', choices=['auto', 'controls', 'power'], default='auto'),
            read_cooling=dict(type='bool', default=True),
            timeout=dict(type='int', default=30),
            ipmitool_path=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    if module.params['limit_watts'] is not None and module.params['limit_watts'] < 0:
        module.fail_json(msg='limit_watts=%d: expected 0 (no cap) or a positive number of watts'
                         % module.params['limit_watts'])
    try:
        result = _ipmi(module) if module.params['protocol'] == 'ipmi' else _redfish(module)
    except BmcFailure as err:
        module.fail_json(msg=str(err))
    except Exception as err:  # pylint: disable=broad-except
        # Fail closed: an answer no branch above accounts for is named, never a traceback.
        module.fail_json(msg='BMC %s: stopped at an answer the module cannot account for (%s: %s)'
                         % (module.params['address'], type(err).__name__, to_native(err)))
    result['diff'] = {'before': {'limit_watts': result['before_watts']}, 'after': {'limit_watts': result['limit_watts']}}
    want = module.params['limit_watts']
    checks = [check('power_limit', result['resource'], 'ok', result['limit_watts'], want,
                    'node power cap %s W%s' % (result['limit_watts'] or 'none (0)',
                                               ' (set from %s W)' % result['before_watts'] if result['changed']
                                               else ''))]
    if 'cooling' in result:
        checks += cooling_checks(result['cooling'])
    result['checks'], result['verdict'] = checks, verdict(checks)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
