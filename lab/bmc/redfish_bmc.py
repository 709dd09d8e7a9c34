#!/usr/bin/env python3
# -*- coding: utf-8 -*-
"""LAB ONLY: a small Redfish BMC for one simulated GPU node.

Serves the subset of the DMTF Redfish schema the bmc_power role uses, over HTTPS with HTTP Basic
auth or Redfish sessions (X-Auth-Token):

  /redfish/v1                                   ServiceRoot
  /redfish/v1/SessionService/Sessions           POST creates a session, DELETE .../<id> ends it
  /redfish/v1/Chassis                           ChassisCollection
  /redfish/v1/Chassis/<id>                      Chassis
  /redfish/v1/Chassis/<id>/Power                Power (PowerControl[0].PowerLimit.LimitInWatts, PATCH)
  /redfish/v1/Chassis/<id>/Controls             ControlCollection (Redfish 2021.1+)
  /redfish/v1/Chassis/<id>/Controls/PowerLimit  Control (SetPoint, PATCH)
  /redfish/v1/Chassis/<id>/Thermal              Thermal (Temperatures incl. coolant inlet)
  /redfish/v1/Chassis/<id>/ThermalSubsystem     ThermalSubsystem (Coolant inlet, LeakDetection)
  .../ThermalSubsystem/LeakDetection            LeakDetection (LeakDetectorGroups, LeakDetectors link)
  .../ThermalSubsystem/LeakDetection/LeakDetectors[/<id>]
                                                LeakDetectorCollection / LeakDetector (DetectorState)

Both power resources read and write the same node cap, kept in a JSON state file so it survives a
restart like a real BMC's. The state file also holds the sensor readings a test may change before a
restart: coolant_inlet_c, coolant_outlet_c, cooling ("liquid" or "air"), leak_detected (false, or true = the
cold-plate detector reads Critical) and psu_failed (true = the second supply reads Critical, redundancy lost), and
the cap range: capacity_watts and min_limit_watts (reported as the Control's AllowableMax/AllowableMin and
PowerControl[0].PowerCapacityWatts unless report_limit_range is false; a cap outside them is refused either way).
Never installed outside the lab (playbooks/lab/bmc.yml).
"""

import argparse
import base64
import hmac
import json
import os
import secrets
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ODATA_VERSION = "4.0"
DEFAULT_STATE = {
    "limit_watts": 0,          # 0 = no cap (LimitInWatts null)
    "capacity_watts": 10200,
    "min_limit_watts": 0,      # the lowest cap it accepts (0 removes the cap), its AllowableMin
    "report_limit_range": True,  # false: no AllowableMin/AllowableMax and no PowerCapacityWatts (iDRAC and iLO
                                 # report none next to PowerLimit); it still refuses what is out of range
    "consumed_watts": 3100,
    "coolant_inlet_c": 32.0,
    "coolant_outlet_c": 41.0,
    "leak_detected": False,
    "psu_failed": False,       # true: the second power supply reports Critical, redundancy lost
    "cooling": "liquid",       # "liquid" serves LeakDetection and coolant readings; "air" does not
}


def redfish_error(message_id, message, resolution=""):
    """A Redfish error body (DMTF DSP0266 "Error responses")."""
    return {
        "error": {
            "code": "Base.1.8." + message_id,
            "message": message,
            "@Message.ExtendedInfo": [{
                "@odata.type": "#Message.v1_1_1.Message",
                "MessageId": "Base.1.8." + message_id,
                "Message": message,
                "Resolution": resolution,
                "Severity": "Critical",
            }],
        }
    }


class BmcState(object):
    """The node cap and sensor readings, persisted to a JSON file on every change."""

    def __init__(self, path, chassis_id):
        self.path = path
        self.chassis_id = chassis_id
        self.lock = threading.Lock()
        self.data = dict(DEFAULT_STATE)
        if path and os.path.exists(path):
            with open(path) as handle:
                self.data.update(json.load(handle))

    def get(self, key):
        with self.lock:
            return self.data[key]

    def set_limit(self, watts):
        with self.lock:
            self.data["limit_watts"] = int(watts)
            if self.path:
                tmp = self.path + ".tmp"
                with open(tmp, "w") as handle:
                    json.dump(self.data, handle, indent=2, sort_keys=True)
                    handle.write("\n")
                os.replace(tmp, self.path)


def _chassis_base(cid):
    return "/redfish/v1/Chassis/%s" % cid


def service_root():
    return {
        "@odata.id": "/redfish/v1",
        "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
        "Id": "RootService",
        "Name": "Lab Redfish Service",
        "RedfishVersion": "1.17.0",
        "UUID": "00000000-0000-4000-8000-00000000b3c0",
        "Chassis": {"@odata.id": "/redfish/v1/Chassis"},
        "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
        "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}},
    }


def chassis_collection(cid):
    return {
        "@odata.id": "/redfish/v1/Chassis",
        "@odata.type": "#ChassisCollection.ChassisCollection",
        "Name": "Chassis Collection",
        "Members@odata.count": 1,
        "Members": [{"@odata.id": _chassis_base(cid)}],
    }


def chassis(state):
    base = _chassis_base(state.chassis_id)
    body = {
        "@odata.id": base,
        "@odata.type": "#Chassis.v1_23_0.Chassis",
        "Id": state.chassis_id,
        "Name": "GPU node chassis",
        "ChassisType": "RackMount",
        "PowerState": "On",
        "Power": {"@odata.id": base + "/Power"},
        "Controls": {"@odata.id": base + "/Controls"},
        "Thermal": {"@odata.id": base + "/Thermal"},
        "ThermalSubsystem": {"@odata.id": base + "/ThermalSubsystem"},
        "Status": {"State": "Enabled", "Health": "OK"},
    }
    return body


def power(state):
    base = _chassis_base(state.chassis_id)
    limit = state.get("limit_watts")
    body = {
        "@odata.id": base + "/Power",
        "@odata.type": "#Power.v1_7_1.Power",
        "Id": "Power",
        "Name": "Power",
        "PowerControl": [{
            "@odata.id": base + "/Power#/PowerControl/0",
            "MemberId": "0",
            "Name": "Chassis power control",
            "PowerConsumedWatts": state.get("consumed_watts"),
            "PowerLimit": {
                "LimitInWatts": limit if limit else None,
                "LimitException": "LogEventOnly",
                "CorrectionInMs": 1000,
            },
        }],
        # Two supplies in an N+1 set, as DMTF's rackmount mockup (Power.v1_7) shapes them.
        "PowerSupplies": [{
            "@odata.id": base + "/Power#/PowerSupplies/%d" % n,
            "MemberId": str(n),
            "Name": "Power Supply %d" % (n + 1),
            "Status": {"State": "Enabled",
                       "Health": "Critical" if n == 1 and state.get("psu_failed") else "OK"},
        } for n in range(2)],
        "Redundancy": [{
            "@odata.id": base + "/Power#/Redundancy/0",
            "MemberId": "0",
            "Name": "PowerSupply Redundancy Group 1",
            "Mode": "N+m",
            "MinNumNeeded": 1,
            "Status": {"State": "Enabled", "Health": "Critical" if state.get("psu_failed") else "OK"},
        }],
    }
    if state.get("report_limit_range"):
        body["PowerControl"][0]["PowerCapacityWatts"] = state.get("capacity_watts")
    return body


def controls(state):
    base = _chassis_base(state.chassis_id)
    return {
        "@odata.id": base + "/Controls",
        "@odata.type": "#ControlCollection.ControlCollection",
        "Name": "Controls",
        "Members@odata.count": 1,
        "Members": [{"@odata.id": base + "/Controls/PowerLimit"}],
    }


def power_limit_control(state):
    base = _chassis_base(state.chassis_id)
    limit = state.get("limit_watts")
    body = {
        "@odata.id": base + "/Controls/PowerLimit",
        "@odata.type": "#Control.v1_3_0.Control",
        "Id": "PowerLimit",
        "Name": "Chassis power limit",
        "ControlType": "Power",
        "ControlMode": "Automatic" if limit else "Disabled",
        "SetPoint": limit if limit else None,
        "SetPointUnits": "W",
        "PhysicalContext": "Chassis",
        "Status": {"State": "Enabled", "Health": "OK"},
    }
    if state.get("report_limit_range"):
        body.update(AllowableMin=state.get("min_limit_watts"), AllowableMax=state.get("capacity_watts"))
    return body


def thermal(state):
    base = _chassis_base(state.chassis_id)
    temps = [{
        "@odata.id": base + "/Thermal#/Temperatures/0",
        "MemberId": "0",
        "Name": "Intake",
        "ReadingCelsius": 24.0,
        "PhysicalContext": "Intake",
    }]
    if state.get("cooling") == "liquid":
        temps.append({
            "@odata.id": base + "/Thermal#/Temperatures/1",
            "MemberId": "1",
            "Name": "Coolant inlet",
            "ReadingCelsius": state.get("coolant_inlet_c"),
            "PhysicalContext": "LiquidInlet",
        })
    return {
        "@odata.id": base + "/Thermal",
        "@odata.type": "#Thermal.v1_7_1.Thermal",
        "Id": "Thermal",
        "Name": "Thermal",
        "Temperatures": temps,
    }


def thermal_subsystem(state):
    base = _chassis_base(state.chassis_id)
    body = {
        "@odata.id": base + "/ThermalSubsystem",
        "@odata.type": "#ThermalSubsystem.v1_3_0.ThermalSubsystem",
        "Id": "ThermalSubsystem",
        "Name": "Thermal subsystem",
        "Status": {"State": "Enabled", "Health": "OK"},
    }
    if state.get("cooling") == "liquid":
        body["Coolant"] = {
            "CoolantType": "Water",
            "InletTemperatureCelsius": {"Reading": state.get("coolant_inlet_c")},
            "OutletTemperatureCelsius": {"Reading": state.get("coolant_outlet_c")},
        }
        leak = bool(state.get("leak_detected"))
        # DSP0268 links LeakDetection; the inline Status and groups are kept for older clients.
        body["LeakDetection"] = {
            "@odata.id": base + "/ThermalSubsystem/LeakDetection",
            "Status": {"State": "Enabled", "Health": "Critical" if leak else "OK"},
            "LeakDetectorGroups": [{
                "GroupName": "Cold plates",
                "Status": {"State": "Enabled", "Health": "Critical" if leak else "OK"},
            }],
        }
    return body


LEAK_DETECTORS = (("ColdPlate", "Cold plate moisture", "Moisture", "GPU"),
                  ("Manifold", "Rack manifold float switch", "FloatSwitch", "LiquidInlet"))


def _leak_state(state, detector_id):
    # leak_detected=true: the cold-plate detector (the one under the GPUs) reads Critical
    return "Critical" if state.get("leak_detected") and detector_id == "ColdPlate" else "OK"


def leak_detection(state):
    base = _chassis_base(state.chassis_id) + "/ThermalSubsystem/LeakDetection"
    health = "Critical" if state.get("leak_detected") else "OK"
    return {
        "@odata.id": base,
        "@odata.type": "#LeakDetection.v1_0_0.LeakDetection",
        "Id": "LeakDetection",
        "Name": "Leak detection",
        "LeakDetectorGroups": [{
            "GroupName": "Cold plates",
            "Detectors": [{"DataSourceUri": base + "/LeakDetectors/" + d[0],
                           "DetectorState": _leak_state(state, d[0])} for d in LEAK_DETECTORS],
            "Status": {"State": "Enabled", "Health": health},
        }],
        "LeakDetectors": {"@odata.id": base + "/LeakDetectors"},
        "Status": {"State": "Enabled", "Health": health},
    }


def leak_detectors(state):
    base = _chassis_base(state.chassis_id) + "/ThermalSubsystem/LeakDetection/LeakDetectors"
    return {
        "@odata.id": base,
        "@odata.type": "#LeakDetectorCollection.LeakDetectorCollection",
        "Name": "Leak detectors",
        "Members@odata.count": len(LEAK_DETECTORS),
        "Members": [{"@odata.id": base + "/" + d[0]} for d in LEAK_DETECTORS],
    }


def leak_detector(state, detector_id):
    base = _chassis_base(state.chassis_id) + "/ThermalSubsystem/LeakDetection/LeakDetectors"
    for did, name, kind, context in LEAK_DETECTORS:
        if did == detector_id:
            detector_state = _leak_state(state, did)
            return {
                "@odata.id": base + "/" + did,
                "@odata.type": "#LeakDetector.v1_0_0.LeakDetector",
                "Id": did,
                "Name": name,
                "LeakDetectorType": kind,
                "PhysicalContext": context,
                "DetectorState": detector_state,
                "Status": {"State": "Enabled", "Health": detector_state},
            }
    return None


class RedfishHandler(BaseHTTPRequestHandler):
    server_version = "LabRedfish/1.0"
    protocol_version = "HTTP/1.1"

    # -- plumbing --------------------------------------------------------------------------------
    def log_message(self, fmt, *args):  # never log request headers (they carry credentials)
        if self.server.verbose:
            sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

    def _send(self, code, body, headers=None):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("OData-Version", ODATA_VERSION)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if data:
            self.wfile.write(data)

    def _read_json(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw.decode() or "{}")
        except ValueError:
            return None

    def _authorised(self):
        token = self.headers.get("X-Auth-Token")
        if token:
            with self.server.sessions_lock:
                return any(hmac.compare_digest(token, t) for t in self.server.sessions.values())
        header = self.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        return self._check(user, password)

    def _check(self, user, password):
        ok_user = hmac.compare_digest(user.encode(), self.server.username.encode())
        ok_pass = hmac.compare_digest(password.encode(), self.server.password.encode())
        return ok_user and ok_pass

    def _unauthorised(self):
        self._send(401, redfish_error(
            "NoValidSession",
            "There is no valid session established with the implementation.",
            "Establish a session or supply valid Basic credentials before retrying."),
            {"WWW-Authenticate": 'Basic realm="Redfish"'})

    def _not_found(self):
        self._send(404, redfish_error(
            "ResourceMissingAtURI", "The resource at the URI %s was not found." % self.path,
            "Use a URI the service advertises."))

    def _route(self):
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        base = _chassis_base(self.server.state.chassis_id)
        return path, base

    # -- verbs -----------------------------------------------------------------------------------
    def do_GET(self):  # noqa: N802 (http.server's naming)
        path, base = self._route()
        state = self.server.state
        if path in ("/redfish", "/redfish/v1"):
            # the service root is readable without credentials (DSP0266)
            if path == "/redfish":
                return self._send(200, {"v1": "/redfish/v1/"})
            return self._send(200, service_root())
        if not self._authorised():
            return self._unauthorised()
        pages = {
            "/redfish/v1/Chassis": lambda: chassis_collection(state.chassis_id),
            base: lambda: chassis(state),
            base + "/Power": lambda: power(state),
            base + "/Controls": lambda: controls(state),
            base + "/Controls/PowerLimit": lambda: power_limit_control(state),
            base + "/Thermal": lambda: thermal(state),
            base + "/ThermalSubsystem": lambda: thermal_subsystem(state),
            "/redfish/v1/SessionService": lambda: {
                "@odata.id": "/redfish/v1/SessionService",
                "@odata.type": "#SessionService.v1_1_8.SessionService",
                "Id": "SessionService", "Name": "Session Service", "ServiceEnabled": True,
                "Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}},
        }
        if state.get("cooling") == "liquid":
            leak_base = base + "/ThermalSubsystem/LeakDetection"
            pages[leak_base] = lambda: leak_detection(state)
            pages[leak_base + "/LeakDetectors"] = lambda: leak_detectors(state)
            for did, _name, _kind, _context in LEAK_DETECTORS:
                pages[leak_base + "/LeakDetectors/" + did] = (lambda d=did: leak_detector(state, d))
        if path not in pages:
            return self._not_found()
        return self._send(200, pages[path]())

    def do_POST(self):  # noqa: N802
        path, _ = self._route()
        if path != "/redfish/v1/SessionService/Sessions":
            if not self._authorised():
                return self._unauthorised()
            return self._send(405, redfish_error("ActionNotSupported", "POST is not supported here."))
        body = self._read_json() or {}
        if not self._check(str(body.get("UserName", "")), str(body.get("Password", ""))):
            return self._unauthorised()
        sid = secrets.token_hex(4)
        token = secrets.token_hex(16)
        with self.server.sessions_lock:
            self.server.sessions[sid] = token
        location = "/redfish/v1/SessionService/Sessions/" + sid
        return self._send(201, {"@odata.id": location, "Id": sid, "UserName": body["UserName"]},
                          {"X-Auth-Token": token, "Location": location})

    def do_DELETE(self):  # noqa: N802
        path, _ = self._route()
        if not self._authorised():
            return self._unauthorised()
        prefix = "/redfish/v1/SessionService/Sessions/"
        if path.startswith(prefix):
            with self.server.sessions_lock:
                if self.server.sessions.pop(path[len(prefix):], None) is not None:
                    return self._send(204, None)
        return self._not_found()

    def do_PATCH(self):  # noqa: N802
        path, base = self._route()
        state = self.server.state
        if not self._authorised():
            return self._unauthorised()
        body = self._read_json()
        if body is None:
            return self._send(400, redfish_error("MalformedJSON", "The request body is not valid JSON."))
        if path == base + "/Power":
            try:
                watts = body["PowerControl"][0]["PowerLimit"]["LimitInWatts"]
            except (KeyError, IndexError, TypeError):
                return self._send(400, redfish_error(
                    "PropertyMissing", "PowerControl[0].PowerLimit.LimitInWatts is required."))
            render = power
        elif path == base + "/Controls/PowerLimit":
            if "SetPoint" not in body:
                return self._send(400, redfish_error("PropertyMissing", "SetPoint is required."))
            watts = body["SetPoint"]
            render = power_limit_control
        elif path in (base, base + "/Controls", base + "/Thermal", base + "/ThermalSubsystem"):
            return self._send(405, redfish_error("ActionNotSupported", "PATCH is not supported here."))
        else:
            return self._not_found()
        watts = 0 if watts is None else watts
        if isinstance(watts, bool) or not isinstance(watts, (int, float)):
            return self._send(400, redfish_error(
                "PropertyValueTypeError", "The value %r is not a number of watts." % (watts,)))
        low = state.get("min_limit_watts")
        if watts < 0 or (0 < watts < low) or watts > state.get("capacity_watts"):
            return self._send(400, redfish_error(
                "PropertyValueOutOfRange",
                "The value %s is out of range %s-%s W." % (watts, low, state.get("capacity_watts"))))
        state.set_limit(watts)
        return self._send(200, render(state))


def make_server(host, port, username, password, state_path=None, chassis_id="1",
                certfile=None, keyfile=None, verbose=False):
    """Build (not start) the server; port 0 picks a free port (server.server_address[1])."""
    server = ThreadingHTTPServer((host, port), RedfishHandler)
    server.daemon_threads = True
    server.username = username
    server.password = password
    server.state = BmcState(state_path, chassis_id)
    server.sessions = {}
    server.sessions_lock = threading.Lock()
    server.verbose = verbose
    if certfile:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(certfile, keyfile)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    return server


def _read_credentials(path):
    """A JSON file {"username": ..., "password": ...} (mode 0600), so the secret is in no argv."""
    with open(path) as handle:
        creds = json.load(handle)
    return creds["username"], creds["password"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--credentials", required=True, help="JSON file with username and password")
    parser.add_argument("--state", required=True, help="JSON state file (created when absent)")
    parser.add_argument("--chassis-id", default="1")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    username, password = _read_credentials(args.credentials)
    server = make_server(args.listen, args.port, username, password, args.state, args.chassis_id,
                         args.cert, args.key, args.verbose)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
