"""Tests of the lab Redfish BMC (lab/bmc/redfish_bmc.py): started in-process on 127.0.0.1 on an
ephemeral port, over real HTTPS with a throwaway self-signed certificate, exercised with urllib."""
import base64
import json
import os
import ssl
import sys
import threading
import urllib.error
import urllib.request

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lab", "bmc"))

import redfish_bmc  # noqa: E402  (path set above)

USER, PASSWORD = "labadmin", "unit-test-pw-0"
CHASSIS = "/redfish/v1/Chassis/1"


class Bmc:
    def __init__(self, server, crt):
        self.server = server
        self.base = "https://127.0.0.1:%d" % server.server_address[1]
        self.ctx = ssl.create_default_context(cafile=crt)

    def call(self, method, path, body=None, user=USER, password=PASSWORD, headers=None):
        req = urllib.request.Request(self.base + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None)
        if body is not None:
            req.add_header("Content-Type", "application/json")
        if user is not None:
            token = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
            req.add_header("Authorization", "Basic " + token)
        for key, value in (headers or {}).items():
            req.add_header(key, value)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=10) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None, resp.headers
        except urllib.error.HTTPError as err:
            raw = err.read()
            return err.code, json.loads(raw) if raw else None, err.headers


def _start(tmp_path, cert, **kwargs):
    server = redfish_bmc.make_server("127.0.0.1", 0, USER, PASSWORD, str(tmp_path / "state.json"),
                                     certfile=cert[0], keyfile=cert[1], **kwargs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def bmc(tmp_path, cert):
    server = _start(tmp_path, cert)
    yield Bmc(server, cert[0])
    server.shutdown()
    server.server_close()


def test_service_root_is_public_and_links_chassis(bmc):
    code, body, headers = bmc.call("GET", "/redfish/v1", user=None)
    assert code == 200
    assert body["@odata.type"].startswith("#ServiceRoot.")
    assert body["Chassis"] == {"@odata.id": "/redfish/v1/Chassis"}
    assert headers["OData-Version"] == "4.0"


def test_chassis_collection_and_links(bmc):
    code, body, _ = bmc.call("GET", "/redfish/v1/Chassis")
    assert code == 200 and body["Members"] == [{"@odata.id": CHASSIS}]
    code, body, _ = bmc.call("GET", CHASSIS)
    assert code == 200
    for link in ("Power", "Controls", "Thermal", "ThermalSubsystem"):
        assert body[link] == {"@odata.id": CHASSIS + "/" + link}


@pytest.mark.parametrize("user,password", [(USER, "wrong"), ("root", PASSWORD), (None, None)])
def test_bad_credentials_get_401_with_redfish_error(bmc, user, password):
    code, body, headers = bmc.call("GET", CHASSIS + "/Power", user=user, password=password)
    assert code == 401
    assert body["error"]["code"] == "Base.1.8.NoValidSession"
    assert body["error"]["@Message.ExtendedInfo"][0]["MessageId"] == "Base.1.8.NoValidSession"
    assert headers["WWW-Authenticate"].startswith("Basic")
    assert PASSWORD not in json.dumps(body)


def test_bad_credentials_cannot_patch(bmc):
    code, _, _ = bmc.call("PATCH", CHASSIS + "/Power", password="wrong",
                          body={"PowerControl": [{"PowerLimit": {"LimitInWatts": 1000}}]})
    assert code == 401
    assert bmc.server.state.get("limit_watts") == 0


def test_no_cap_reads_null(bmc):
    _, body, _ = bmc.call("GET", CHASSIS + "/Power")
    assert body["PowerControl"][0]["PowerLimit"]["LimitInWatts"] is None
    _, body, _ = bmc.call("GET", CHASSIS + "/Controls/PowerLimit")
    assert body["SetPoint"] is None and body["ControlMode"] == "Disabled"


def test_patch_power_control_persists_and_shows_in_controls(bmc, tmp_path):
    code, body, _ = bmc.call("PATCH", CHASSIS + "/Power",
                             body={"PowerControl": [{"PowerLimit": {"LimitInWatts": 6400}}]})
    assert code == 200
    assert body["PowerControl"][0]["PowerLimit"]["LimitInWatts"] == 6400
    _, body, _ = bmc.call("GET", CHASSIS + "/Controls/PowerLimit")
    assert body["SetPoint"] == 6400 and body["SetPointUnits"] == "W"
    with open(tmp_path / "state.json") as handle:
        assert json.load(handle)["limit_watts"] == 6400


def test_patch_controls_setpoint(bmc):
    code, body, _ = bmc.call("PATCH", CHASSIS + "/Controls/PowerLimit", body={"SetPoint": 5000})
    assert code == 200 and body["SetPoint"] == 5000 and body["ControlMode"] == "Automatic"
    _, body, _ = bmc.call("GET", CHASSIS + "/Power")
    assert body["PowerControl"][0]["PowerLimit"]["LimitInWatts"] == 5000


def test_state_survives_restart(tmp_path, cert):
    server = _start(tmp_path, cert)
    Bmc(server, cert[0]).call("PATCH", CHASSIS + "/Controls/PowerLimit", body={"SetPoint": 4321})
    server.shutdown()
    server.server_close()
    server = _start(tmp_path, cert)
    try:
        _, body, _ = Bmc(server, cert[0]).call("GET", CHASSIS + "/Power")
        assert body["PowerControl"][0]["PowerLimit"]["LimitInWatts"] == 4321
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("path,body,message_id", [
    (CHASSIS + "/Power", {"PowerControl": [{"PowerLimit": {"LimitInWatts": 99999}}]}, "PropertyValueOutOfRange"),
    (CHASSIS + "/Power", {"PowerControl": [{"PowerLimit": {"LimitInWatts": "lots"}}]}, "PropertyValueTypeError"),
    (CHASSIS + "/Power", {"PowerControl": []}, "PropertyMissing"),
    (CHASSIS + "/Controls/PowerLimit", {"SetPoint": -1}, "PropertyValueOutOfRange"),
    (CHASSIS + "/Controls/PowerLimit", {}, "PropertyMissing"),
])
def test_bad_patch_is_400_and_changes_nothing(bmc, path, body, message_id):
    code, err, _ = bmc.call("PATCH", path, body=body)
    assert code == 400
    assert err["error"]["code"] == "Base.1.8." + message_id
    assert bmc.server.state.get("limit_watts") == 0


def test_unknown_resource_is_404(bmc):
    code, body, _ = bmc.call("GET", CHASSIS + "/Nope")
    assert code == 404 and body["error"]["code"] == "Base.1.8.ResourceMissingAtURI"


def test_thermal_resources_report_coolant_and_leaks(bmc):
    _, body, _ = bmc.call("GET", CHASSIS + "/Thermal")
    inlet = [t for t in body["Temperatures"] if t["PhysicalContext"] == "LiquidInlet"]
    assert inlet and inlet[0]["ReadingCelsius"] == 32.0
    _, body, _ = bmc.call("GET", CHASSIS + "/ThermalSubsystem")
    assert body["Coolant"]["InletTemperatureCelsius"]["Reading"] == 32.0
    assert body["LeakDetection"]["Status"]["Health"] == "OK"


def test_air_cooled_node_has_no_leak_detection(tmp_path, cert):
    (tmp_path / "state.json").write_text(json.dumps({"cooling": "air"}))
    server = _start(tmp_path, cert)
    try:
        _, body, _ = Bmc(server, cert[0]).call("GET", CHASSIS + "/ThermalSubsystem")
        assert "LeakDetection" not in body and "Coolant" not in body
    finally:
        server.shutdown()
        server.server_close()


def test_sessions(bmc):
    code, body, headers = bmc.call("POST", "/redfish/v1/SessionService/Sessions", user=None,
                                   body={"UserName": USER, "Password": PASSWORD})
    assert code == 201
    token, location = headers["X-Auth-Token"], headers["Location"]
    code, _, _ = bmc.call("GET", CHASSIS + "/Power", user=None, headers={"X-Auth-Token": token})
    assert code == 200
    code, _, _ = bmc.call("DELETE", location, user=None, headers={"X-Auth-Token": token})
    assert code == 204
    code, _, _ = bmc.call("GET", CHASSIS + "/Power", user=None, headers={"X-Auth-Token": token})
    assert code == 401
    code, _, _ = bmc.call("POST", "/redfish/v1/SessionService/Sessions", user=None,
                          body={"UserName": USER, "Password": "wrong"})
    assert code == 401


def test_plain_http_is_refused(bmc):
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(bmc.base.replace("https", "http") + "/redfish/v1", timeout=5).read()
