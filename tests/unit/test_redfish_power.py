"""library/redfish_power.py against the real lab Redfish BMC (lab/bmc/redfish_bmc.py) started in-process
over HTTPS on 127.0.0.1; the DMTF LeakDetection resources of the lab BMC; the IPMI DCMI fallback with
run_command mocked at the boundary."""

import base64
import json
import os
import ssl
import sys
import threading
import urllib.request

import pytest

from conftest import ROOT
from helpers import run_module

sys.path.insert(0, os.path.join(ROOT, "lab", "bmc"))

import redfish_bmc  # noqa: E402  (path set above)
import redfish_power  # noqa: E402
from ansible.module_utils.redfish_power import (  # noqa: E402
    RedfishError, cooling_summary, limit_range, parse_dcmi_limit)

USER, PASSWORD = "labadmin", "unit-redfish-pw-S3CRET"


class Lab:
    def __init__(self, tmp_path, cert, state=None):
        self.state_path = tmp_path / "state.json"
        if state:
            self.state_path.write_text(json.dumps(state))
        self.server = redfish_bmc.make_server("127.0.0.1", 0, USER, PASSWORD, str(self.state_path),
                                              certfile=cert[0], keyfile=cert[1])
        self.port = self.server.server_address[1]
        self.ca = cert[0]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def args(self, **kwargs):
        args = {"address": "127.0.0.1", "port": self.port, "username": USER, "password": PASSWORD,
                "ca_path": self.ca}
        args.update(kwargs)
        return args

    def run(self, check_mode=False, **kwargs):
        result, failed, _ = run_module(redfish_power.main, self.args(**kwargs), {}, check_mode=check_mode)
        return result, failed

    def saved_limit(self):
        return json.loads(self.state_path.read_text())["limit_watts"]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def lab(tmp_path, cert):
    bmc = Lab(tmp_path, cert)
    yield bmc
    bmc.stop()


@pytest.mark.parametrize("auth", ["session", "basic"])
@pytest.mark.parametrize("interface,resource", [("auto", "/redfish/v1/Chassis/1/Controls/PowerLimit"),
                                                ("controls", "/redfish/v1/Chassis/1/Controls/PowerLimit"),
                                                ("power", "/redfish/v1/Chassis/1/Power")])
def test_sets_the_cap_reads_it_back_and_is_idempotent(lab, auth, interface, resource):
    result, failed = lab.run(limit_watts=6100, auth=auth, interface=interface)
    assert not failed, result
    assert result["changed"] and result["before_watts"] == 0 and result["limit_watts"] == 6100
    assert result["interface"] == interface if interface != "auto" else result["interface"] == "controls"
    assert result["resource"] == resource
    assert result["diff"] == {"before": {"limit_watts": 0}, "after": {"limit_watts": 6100}}
    assert lab.saved_limit() == 6100
    again, failed = lab.run(limit_watts=6100, auth=auth, interface=interface)
    assert not failed and not again["changed"] and again["before_watts"] == 6100
    # the sessions the module opened were closed again
    assert lab.server.sessions == {}


def test_check_mode_reports_the_change_and_writes_nothing(lab):
    result, failed = lab.run(check_mode=True, limit_watts=5000)
    assert not failed and result["changed"] and result["limit_watts"] == 5000
    assert not lab.state_path.exists() or lab.saved_limit() == 0
    read, _ = lab.run()
    assert read["limit_watts"] == 0 and not read["changed"]


def test_zero_removes_the_cap(lab):
    lab.run(limit_watts=5000)
    result, failed = lab.run(limit_watts=0, interface="power")
    assert not failed and result["changed"] and result["before_watts"] == 5000 and result["limit_watts"] == 0
    assert lab.saved_limit() == 0


def test_read_only_reports_cooling(lab):
    result, failed = lab.run()
    assert not failed and not result["changed"]
    assert result["cooling"] == {"coolant_inlet_c": 32.0, "coolant_outlet_c": 41.0, "leak_detection": True,
                                 "leak_detected": False,
                                 "leaks": [], "sources": ["ThermalSubsystem", "LeakDetection", "Thermal"], "problems": []}
    assert result["verdict"] == "ok"
    assert [(c["name"], c["subject"], c["status"], c["measured"]) for c in result["checks"]] == [
        ("power_limit", result["resource"], "ok", result["limit_watts"]),
        ("leak", "leak detection", "ok", "no leak"), ("coolant_inlet_c", "coolant", "ok", 32.0)]


def test_a_leak_is_reported_by_detector(tmp_path, cert):
    bmc = Lab(tmp_path, cert, {"leak_detected": True, "coolant_inlet_c": 47.5})
    try:
        result, failed = bmc.run()
    finally:
        bmc.stop()
    assert not failed
    assert result["cooling"]["leak_detected"] and result["cooling"]["coolant_inlet_c"] == 47.5
    assert "Cold plates" in result["cooling"]["leaks"] and "Cold plate moisture" in result["cooling"]["leaks"]
    assert "Rack manifold float switch" not in result["cooling"]["leaks"]
    assert result["verdict"] == "fail"
    assert ("leak", "Cold plates", "fail", "leak detected by Cold plates") in [
        (c["name"], c["subject"], c["status"], c["reason"]) for c in result["checks"]]


def test_air_cooled_node_has_no_coolant_or_leak_detection(tmp_path, cert):
    bmc = Lab(tmp_path, cert, {"cooling": "air"})
    try:
        result, failed = bmc.run(limit_watts=3000)
    finally:
        bmc.stop()
    assert not failed and result["limit_watts"] == 3000
    assert result["cooling"]["coolant_inlet_c"] is None and not result["cooling"]["leak_detection"]
    assert result["verdict"] == "warn" and [(c["name"], c["status"]) for c in result["checks"]] == [
        ("power_limit", "ok"), ("leak", "warn"), ("coolant_inlet_c", "warn")]


@pytest.mark.parametrize("auth", ["session", "basic"])
def test_wrong_password_fails_clearly_without_the_secret(lab, auth):
    result, failed = lab.run(password="not-the-" + PASSWORD, limit_watts=4000, auth=auth)
    assert failed
    assert "refused the credentials (HTTP 401 Base.1.8.NoValidSession" in result["msg"]
    assert "check bmc_username and bmc_password" in result["msg"]
    text = json.dumps(result)
    assert PASSWORD not in text and USER not in text
    assert not lab.state_path.exists() or lab.saved_limit() == 0


@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize("interface,watts,reason,reported", [
    ("auto", 99999, "above the 10200 W maximum", "1600-10200 W (AllowableMin, AllowableMax)"),
    ("auto", 800, "below the 1600 W minimum", "1600-10200 W (AllowableMin, AllowableMax)"),
    ("power", 10201, "above the 10200 W maximum", "up to 10200 W (PowerControl[0].PowerCapacityWatts)"),
])
def test_a_cap_outside_the_range_the_bmc_reports_is_refused_before_any_write(tmp_path, cert, interface, watts, reason,
                                                                             reported, check_mode):
    """The second guard: the cap the BMC itself says it cannot hold is never written, in check mode either."""
    bmc = Lab(tmp_path, cert, {"min_limit_watts": 1600, "limit_watts": 6000})
    try:
        result, failed = bmc.run(check_mode=check_mode, limit_watts=watts, interface=interface)
        saved = bmc.saved_limit()
    finally:
        bmc.stop()
    resource = "/redfish/v1/Chassis/1/" + ("Controls/PowerLimit" if interface == "auto" else "Power")
    assert failed and result["msg"] == (
        "BMC https://127.0.0.1:%d: refusing to write a node cap of %d W to %s: it is %s of the range the BMC reports, "
        "%s; nothing was written" % (bmc.port, watts, resource, reason, reported)), result["msg"]
    assert saved == 6000 and bmc.server.sessions == {}


def test_a_cap_inside_the_range_and_no_cap_are_written_and_the_range_returned(tmp_path, cert):
    bmc = Lab(tmp_path, cert, {"min_limit_watts": 1600})
    try:
        lowest, failed = bmc.run(limit_watts=1600)
        assert not failed and bmc.saved_limit() == 1600, lowest
        highest, failed = bmc.run(limit_watts=10200, interface="power")
        assert not failed and bmc.saved_limit() == 10200, highest
        removed, failed = bmc.run(limit_watts=0)  # 0 removes the cap: never refused, whatever the range
        assert not failed and bmc.saved_limit() == 0, removed
    finally:
        bmc.stop()
    assert lowest["limit_range"] == {"min": 1600, "max": 10200, "sources": ["AllowableMin", "AllowableMax"]}
    assert highest["limit_range"] == {"min": None, "max": 10200, "sources": ["PowerControl[0].PowerCapacityWatts"]}


@pytest.mark.parametrize("interface", ["auto", "power"])
def test_a_bmc_that_reports_no_range_gets_the_cap_and_its_own_answer_decides(tmp_path, cert, interface):
    """No AllowableMin/Max, no PowerCapacityWatts (iDRAC, iLO): the module cannot prove a cap unsafe, so it writes it
    (preflight has held it to the node's floor) and the BMC's refusal is the failure, naming the BMC's error."""
    bmc = Lab(tmp_path, cert, {"report_limit_range": False})
    try:
        ok, ok_failed = bmc.run(limit_watts=6000, interface=interface)
        result, failed = bmc.run(limit_watts=99999, interface=interface)
        saved = bmc.saved_limit()
    finally:
        bmc.stop()
    assert not ok_failed and ok["limit_range"] is None and ok["limit_watts"] == 6000
    assert failed and "HTTP 400 Base.1.8.PropertyValueOutOfRange" in result["msg"], result["msg"]
    assert saved == 6000


# Cap resources as BMCs serve them (../shared/fixtures/redfish-notes.md and its sources): (interface, body, range)
LIMIT_RANGES = [
    # DMTF rackmount mockup Control: 150-1000 W
    ("controls", {"ControlType": "Power", "SetPoint": 500, "AllowableMin": 150, "AllowableMax": 1000},
     {"min": 150, "max": 1000, "sources": ["AllowableMin", "AllowableMax"]}),
    # Lenovo XCC Controls/PowerLimit: AllowableMin 0 (the real floor is only in the Power resource's Oem)
    ("controls", {"ControlType": "Power", "SetPoint": None, "ControlMode": "Disabled", "AllowableMin": 0,
                  "AllowableMax": 5760}, {"min": 0, "max": 5760, "sources": ["AllowableMin", "AllowableMax"]}),
    # HPE Cray EX node Control: non-DMTF SettingRangeMin/Max
    ("controls", {"ControlType": "Power", "SettingRangeMin": 350, "SettingRangeMax": 850},
     {"min": 350, "max": 850, "sources": ["SettingRangeMin", "SettingRangeMax"]}),
    # a Control reporting a maximum only (AllowableMin null)
    ("controls", {"ControlType": "Power", "AllowableMin": None, "AllowableMax": 5600},
     {"min": None, "max": 5600, "sources": ["AllowableMax"]}),
    # Dell iDRAC9 Power: PowerLimit without any range
    ("power", {"PowerControl": [{"PowerLimit": {"LimitInWatts": 1205, "LimitException": "HardPowerOff"}}]}, None),
    # HPE iLO 5: capacity, and a MinimumSafelyAchievableCap that is not valid (ignored)
    ("power", {"Oem": {"Hpe": {"MinimumSafelyAchievableCap": None, "MinimumSafelyAchievableCapValid": False}},
               "PowerControl": [{"PowerCapacityWatts": 1600, "PowerLimit": {"LimitInWatts": None}}]},
     {"min": None, "max": 1600, "sources": ["PowerControl[0].PowerCapacityWatts"]}),
    ("power", {"Oem": {"Hpe": {"MinimumSafelyAchievableCap": 412, "MinimumSafelyAchievableCapValid": True}},
               "PowerControl": [{"PowerCapacityWatts": 1600}]},
     {"min": 412, "max": 1600,
      "sources": ["Oem.Hpe.MinimumSafelyAchievableCap", "PowerControl[0].PowerCapacityWatts"]}),
    # Lenovo XCC Power: MinLimitInWatts 0 hides the floor CapacityMinAC 675
    ("power", {"PowerControl": [{"PowerCapacityWatts": 750, "PowerLimit": {"LimitInWatts": None},
                                 "Oem": {"Lenovo": {"PowerUtilization": {
                                     "GuaranteedInWatts": 675, "LimitMode": "AC", "MaxLimitInWatts": 750,
                                     "MinLimitInWatts": 0, "CapacityMaxAC": 782, "CapacityMinAC": 675}}}}]},
     {"min": 675, "max": 750, "sources": ["PowerControl[0].Oem.Lenovo.PowerUtilization.MinLimitInWatts",
                                          "PowerControl[0].Oem.Lenovo.PowerUtilization.CapacityMinAC",
                                          "PowerControl[0].PowerCapacityWatts",
                                          "PowerControl[0].Oem.Lenovo.PowerUtilization.MaxLimitInWatts"]}),
]


@pytest.mark.parametrize("interface,body,expected", LIMIT_RANGES)
def test_limit_range_reads_what_each_bmc_reports(interface, body, expected):
    assert limit_range(body, interface) == expected


@pytest.mark.parametrize("interface,body,message", [
    ("controls", {"AllowableMin": 0, "AllowableMax": "5760 W"}, "AllowableMax is '5760 W', not a number of watts"),
    ("controls", {"AllowableMin": 6000, "AllowableMax": 5000},
     "the reported cap range is empty: AllowableMin 6000 is above AllowableMax 5000"),
    ("power", {"PowerControl": [{"PowerCapacityWatts": -1}]},
     "PowerControl[0].PowerCapacityWatts is -1, not a number of watts"),
])
def test_a_range_that_cannot_be_read_fails_closed(interface, body, message):
    with pytest.raises(RedfishError) as err:
        limit_range(body, interface)
    assert str(err.value) == message


def test_unreachable_bmc_names_the_address(cert):
    result, failed, _ = run_module(redfish_power.main, {"address": "127.0.0.1", "port": 1, "username": USER,
                                                        "password": PASSWORD, "timeout": 2}, {})
    assert failed and result["msg"].startswith("BMC https://127.0.0.1:1: GET /redfish/v1 failed")


def test_untrusted_certificate_fails(lab):
    result, failed = lab.run(ca_path=None)
    assert failed and "CERTIFICATE_VERIFY_FAILED" in result["msg"]


def test_negative_cap_is_rejected_before_any_request(lab):
    result, failed = lab.run(limit_watts=-5)
    assert failed and result["msg"].startswith("limit_watts=-5: expected 0 (no cap) or a positive")


# -- the lab BMC's DMTF leak detection resources ---------------------------------------------------

def test_leak_detection_resources_follow_the_schema(tmp_path, cert):
    bmc = Lab(tmp_path, cert, {"leak_detected": True})
    try:
        ctx = ssl.create_default_context(cafile=bmc.ca)
        auth = "Basic " + base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()).decode()

        def get(path):
            req = urllib.request.Request("https://127.0.0.1:%d%s" % (bmc.port, path), headers={"Authorization": auth})
            with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
                return json.loads(resp.read())

        base = "/redfish/v1/Chassis/1/ThermalSubsystem"
        sub = get(base)
        assert sub["LeakDetection"]["@odata.id"] == base + "/LeakDetection"
        leak = get(base + "/LeakDetection")
        assert leak["@odata.type"] == "#LeakDetection.v1_0_0.LeakDetection"
        assert leak["LeakDetectors"]["@odata.id"] == base + "/LeakDetection/LeakDetectors"
        assert [d["DetectorState"] for d in leak["LeakDetectorGroups"][0]["Detectors"]] == ["Critical", "OK"]
        members = get(base + "/LeakDetection/LeakDetectors")["Members"]
        detectors = [get(m["@odata.id"]) for m in members]
        assert [(d["Id"], d["LeakDetectorType"], d["DetectorState"]) for d in detectors] == [
            ("ColdPlate", "Moisture", "Critical"), ("Manifold", "FloatSwitch", "OK")]
        assert all(d["@odata.type"] == "#LeakDetector.v1_0_0.LeakDetector" for d in detectors)
    finally:
        bmc.stop()


# -- pure functions and the IPMI fallback ----------------------------------------------------------

DCMI_ACTIVE = """
    Current Limit State: Power Limit Active
    Exception actions:   Hard Power Off & Log Event to SEL
    Power Limit:         6000 Watts
    Correction time:     1000 milliseconds
    Sampling period:     1 seconds
"""
DCMI_INACTIVE = DCMI_ACTIVE.replace("Power Limit Active", "No Active Power Limit")


def test_parse_dcmi_limit():
    assert parse_dcmi_limit(DCMI_ACTIVE) == {"limit_watts": 6000, "active": True, "configured_watts": 6000}
    assert parse_dcmi_limit(DCMI_INACTIVE)["limit_watts"] == 0
    with pytest.raises(RedfishError, match="no \"Power Limit"):
        parse_dcmi_limit("garbage")


def test_cooling_summary_reads_old_thermal_only():
    thermal = {"Temperatures": [{"PhysicalContext": "Intake", "ReadingCelsius": 20},
                                {"PhysicalContext": "LiquidInlet", "ReadingCelsius": 30.5}]}
    assert cooling_summary(thermal=thermal) == {"coolant_inlet_c": 30.5, "coolant_outlet_c": None,
                                                "leak_detection": False,
                                                "leak_detected": False, "leaks": [], "sources": ["Thermal"], "problems": []}


def test_ipmi_fallback_sets_activates_and_reads_back_with_the_password_in_the_environment():
    state = {"out": DCMI_INACTIVE}
    envs = []

    def answer(argv):
        return 0, state["out"], ""

    def set_limit(argv):
        state["out"] = DCMI_ACTIVE.replace("6000", argv[-1])
        return 0, "", ""

    responses = {
        (lambda a: a[-3:] == ["dcmi", "power", "get_limit"]): answer,
        (lambda a: a[-5:-1] == ["dcmi", "power", "set_limit", "limit"]): set_limit,
        (lambda a: a[-3:] == ["dcmi", "power", "activate"]): (0, "", ""),
    }
    from helpers import FakeRunner
    original = FakeRunner.__call__

    def spy(self, module_self, args, **kwargs):
        envs.append(kwargs.get("environ_update"))
        return original(self, module_self, args, **kwargs)

    FakeRunner.__call__ = spy
    try:
        result, failed, runner = run_module(
            redfish_power.main, {"address": "198.19.40.50", "protocol": "ipmi", "username": USER,
                                 "password": PASSWORD, "limit_watts": 5500}, responses,
            bins={"ipmitool": "/usr/bin/ipmitool"})
    finally:
        FakeRunner.__call__ = original
    assert not failed, result
    assert result["changed"] and result["before_watts"] == 0 and result["limit_watts"] == 5500
    assert runner.calls[0][:9] == ["/usr/bin/ipmitool", "-I", "lanplus", "-H", "198.19.40.50", "-U", USER, "-E",
                                   "-N"]
    assert [c[10:] for c in runner.calls] == [["dcmi", "power", "get_limit"],
                                             ["dcmi", "power", "set_limit", "limit", "5500"],
                                             ["dcmi", "power", "activate"],
                                             ["dcmi", "power", "get_limit"]]
    assert all(PASSWORD not in arg for call in runner.calls for arg in call)
    assert envs and all(e == {"IPMI_PASSWORD": PASSWORD} for e in envs)


def test_ipmi_wrong_password_is_named_without_the_secret():
    responses = {(lambda a: True): (1, "", "Error: Unable to establish IPMI v2 / RMCP+ session\n"
                                           "RAKP 2 HMAC is invalid")}
    result, failed, _ = run_module(redfish_power.main, {"address": "198.19.40.50", "protocol": "ipmi",
                                                        "username": USER, "password": PASSWORD}, responses,
                                   bins={"ipmitool": "/usr/bin/ipmitool"})
    assert failed and "refused the IPMI credentials" in result["msg"] and PASSWORD not in json.dumps(result)
