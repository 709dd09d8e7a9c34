# -*- coding: utf-8 -*-
"""cooling_summary fails closed on BMC documents it cannot account for (hypothesis).

The documents are the lab BMC's (lab/bmc/redfish_bmc.py, DSP0268 shapes as vendors serve them, see
../shared/fixtures/redfish-notes.md) of a liquid-cooled node without a leak. One value anywhere in them is
replaced by what BMCs really send when something is wrong (null, a string, a number with its unit, a boolean,
an absurd magnitude, an unknown state) or a key is dropped. Whatever happens, cooling_summary returns (no
exception) and never reports a different healthy reading: it names a problem, reports a leak, or reads what
the untouched documents read."""

import copy
import os
import sys

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(ROOT, "lab", "bmc"))

import redfish_bmc  # noqa: E402  (path set above)
from ansible.module_utils.redfish_power import (RedfishError, control_limit, cooling_summary,  # noqa: E402
                                                power_control_limit, power_summary)

STATE = redfish_bmc.BmcState(None, "1")
DOCS = {
    "thermal": redfish_bmc.thermal(STATE),
    "thermal_subsystem": redfish_bmc.thermal_subsystem(STATE),
    "leak_detection": redfish_bmc.leak_detection(STATE),
    "leak_detectors": [redfish_bmc.leak_detector(STATE, d[0]) for d in redfish_bmc.LEAK_DETECTORS],
}
BAD_VALUES = (None, "", "32 C", "32.0", "N/A", True, False, -273.15, 1e9, float("nan"), [], {}, "Unknown",
              "Absent", "Disabled", "StandbyOffline", "Unavailable", "OK ")
DROP = object()


def leaves(node, path=()):
    """Paths of every value in a document tree (dict keys and list indexes)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + (k,)
            yield from leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield path + (i,)
            yield from leaves(v, path + (i,))


PATHS = sorted((p for p in leaves(DOCS) if len(p) > 1), key=repr)


def mutate(docs, path, value):
    docs = copy.deepcopy(docs)
    node = docs
    for key in path[:-1]:
        node = node[key]
    if value is DROP and isinstance(node, dict):
        del node[path[-1]]
    elif value is not DROP:
        node[path[-1]] = value
    return docs


def summarize(docs):
    return cooling_summary(docs["thermal"], docs["thermal_subsystem"], docs["leak_detection"], docs["leak_detectors"])


BASE = summarize(DOCS)


def test_the_untouched_documents_read_healthy():
    assert BASE["problems"] == [] and not BASE["leak_detected"] and BASE["leak_detection"]
    assert BASE["coolant_inlet_c"] == 32.0 and BASE["coolant_outlet_c"] == 41.0


@settings(max_examples=400, deadline=None, derandomize=True)
@given(path=st.sampled_from(PATHS), value=st.sampled_from(BAD_VALUES + (DROP,)))
def test_a_damaged_document_never_reads_healthy_and_different(path, value):
    out = summarize(mutate(DOCS, path, value))
    if out["problems"] or out["leak_detected"]:
        return
    assert out["coolant_inlet_c"] == BASE["coolant_inlet_c"], (path, value, out)
    # an outlet reading may vanish with its Coolant object (then no metric), never read another value
    assert out["coolant_outlet_c"] in (BASE["coolant_outlet_c"], None), (path, value, out)
    assert out["leak_detection"] == BASE["leak_detection"], (path, value, out)


def test_a_critical_detector_is_a_leak_whatever_the_summary_says():
    docs = copy.deepcopy(DOCS)
    docs["leak_detectors"][1]["DetectorState"] = "Critical"
    out = summarize(docs)
    assert out["leak_detected"] and out["leaks"] == ["Rack manifold float switch"]
    assert docs["leak_detection"]["Status"]["Health"] == "OK"


def test_each_problem_names_resource_field_and_value():
    docs = mutate(DOCS, ("thermal_subsystem", "Coolant", "InletTemperatureCelsius", "Reading"), "32 C")
    docs = mutate(docs, ("leak_detectors", 0, "Status", "State"), "Absent")
    assert summarize(docs)["problems"] == [
        "ThermalSubsystem Coolant.InletTemperatureCelsius.Reading is '32 C', not a number",
        "LeakDetector ColdPlate: Status.State is 'Absent', not Enabled"]


# ---- node power draw and PSU redundancy (power_summary), same method
POWER = redfish_bmc.power(STATE)
POWER_PATHS = sorted((p for p in leaves({"power": POWER}) if len(p) > 1), key=repr)
POWER_BASE = power_summary(POWER)


def test_the_untouched_power_document_reads_healthy():
    assert POWER_BASE == {"consumed_watts": 3100.0, "psu_redundancy_ok": True, "problems": [],
                          "psus": [{"name": "Power Supply 1", "health": "OK", "state": "Enabled"},
                                   {"name": "Power Supply 2", "health": "OK", "state": "Enabled"}]}


@settings(max_examples=300, deadline=None, derandomize=True)
@given(path=st.sampled_from(POWER_PATHS), value=st.sampled_from(BAD_VALUES + (DROP,)))
def test_a_damaged_power_document_never_reads_healthy_and_different(path, value):
    out = power_summary(mutate({"power": POWER}, path, value)["power"])
    if out["problems"] or out["psu_redundancy_ok"] is False:
        return
    assert out["consumed_watts"] == POWER_BASE["consumed_watts"], (path, value, out)
    assert out["psu_redundancy_ok"] in (True, None), (path, value, out)


def test_a_failed_supply_loses_redundancy_and_environment_metrics_give_the_draw():
    failed = redfish_bmc.BmcState(None, "1")
    failed.data["psu_failed"] = True
    out = power_summary(redfish_bmc.power(failed))
    assert out["psu_redundancy_ok"] is False and out["consumed_watts"] == 3100.0
    # OpenBMC / GB200 trays: no Power resource, the draw in EnvironmentMetrics (redfish-notes.md)
    assert power_summary(None, {"PowerWatts": {"Reading": 2875.5}})["consumed_watts"] == 2875.5
    assert power_summary(None, {"PowerWatts": {"Reading": None}})["problems"] == [
        "EnvironmentMetrics PowerWatts.Reading is None, not a power in watts"]
    assert power_summary()["problems"] == ["the chassis links neither Power nor EnvironmentMetrics: no power reading"]


# ---- the node cap the BMC holds (power_control_limit, control_limit), same method: damaged documents raise
# RedfishError (the module fails naming BMC, field and value) or read the cap the untouched documents read;
# they read "no cap" only where the damage is DMTF's own way of saying so (a null limit, ControlMode Disabled).
CAPPED = redfish_bmc.BmcState(None, "1")
CAPPED.data["limit_watts"] = 6000
CAP_DOCS = {"power": redfish_bmc.power(CAPPED), "control": redfish_bmc.power_limit_control(CAPPED)}
CAP_PATHS = sorted((p for p in leaves(CAP_DOCS) if len(p) > 1), key=repr)
NO_CAP = {("power", "PowerControl", 0, "PowerLimit", "LimitInWatts"): (None,),
          ("power", "PowerControl", 0, "PowerLimit"): (None,),
          ("control", "SetPoint"): (None,),
          ("control", "ControlMode"): ("Disabled",)}
CAP_BAD_VALUES = BAD_VALUES + ("6000 W", "6000", "6 kW", -6000, float("inf"), "Watt", "%", "Override")


def read_cap(docs):
    return power_control_limit(docs["power"]), control_limit(docs["control"])


def test_the_untouched_cap_documents_read_the_cap():
    assert read_cap(CAP_DOCS) == (6000, 6000)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(path=st.sampled_from(CAP_PATHS), value=st.sampled_from(CAP_BAD_VALUES + (DROP,)))
def test_a_damaged_cap_document_never_reads_another_cap(path, value):
    docs = mutate(CAP_DOCS, path, value)
    which = 0 if path[0] == "power" else 1
    try:
        got = read_cap(docs)[which]
    except RedfishError:
        return
    if got == 0 and value in NO_CAP.get(path, ()) and value is not DROP:
        return
    assert got == 6000, (path, value, got)


@pytest.mark.parametrize("power, message", [
    ({"PowerControl": None}, "the Power resource has no PowerControl[0] object (PowerControl is None)"),
    ({"PowerControl": [None]}, "the Power resource has no PowerControl[0] object (PowerControl is [None])"),
    ({"PowerControl": [{"PowerLimit": {"LimitInWatts": "6000 W"}}]},
     "PowerControl[0].PowerLimit.LimitInWatts is '6000 W', not a number of watts"),
    ({"PowerControl": [{"PowerLimit": {"LimitInWatts": -6000}}]},
     "PowerControl[0].PowerLimit.LimitInWatts is -6000, not a number of watts"),
    ({"PowerControl": [{"PowerLimit": "6000"}]},
     "PowerControl[0].PowerLimit is '6000', not an object with LimitInWatts"),
    ({"PowerControl": [{"Name": "iLO 6 DL380a Gen11"}]},
     "PowerControl[0] has no PowerLimit: this BMC does not hold a node cap in its Power resource"),
    ({"PowerControl": [{"PowerLimit": {"LimitInWatts": 6000}, "Status": {"State": "UnavailableOffline"}}]},
     "PowerControl[0]: Status.State is 'UnavailableOffline', not Enabled"),
])
def test_the_power_limit_path_fails_closed_naming_field_and_value(power, message):
    with pytest.raises(RedfishError) as err:
        power_control_limit(power)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize("control, message", [
    ({"ControlType": "Power", "ControlMode": "Manual", "SetPoint": 60, "SetPointUnits": "%"},
     "the Control's SetPointUnits is '%', not watts"),
    ({"ControlType": "Power", "ControlMode": "Automatic", "SetPoint": "6000"},
     "the Control's SetPoint is '6000', not a number of watts"),
    ({"ControlType": "Power", "ControlMode": "Automatic", "SetPoint": -1}, "the Control's SetPoint is -1"),
    ({"ControlType": "Power", "ControlMode": "Paused", "SetPoint": 6000}, "the Control's ControlMode is 'Paused'"),
    ({"ControlType": "Power", "ControlMode": "Manual"}, "the Control has no SetPoint while its ControlMode is"),
])
def test_the_control_path_fails_closed_naming_field_and_value(control, message):
    with pytest.raises(RedfishError) as err:
        control_limit(control)
    assert str(err.value).startswith(message)


def test_real_vendor_shapes_of_the_cap_still_read():
    # Lenovo XCC: "Watt", Manual; IBM: a SetPoint kept while Disabled is no cap (redfish-notes.md)
    assert control_limit({"ControlType": "Power", "ControlMode": "Manual", "SetPoint": 5000,
                          "SetPointUnits": "Watt"}) == 5000
    assert control_limit({"ControlMode": "Disabled", "SetPoint": 2500}) == 0
    # iLO 5: LimitInWatts null is no cap; iDRAC9 integer watts
    assert power_control_limit({"PowerControl": [{"PowerLimit": {"LimitInWatts": None}}]}) == 0
    assert power_control_limit({"PowerControl": [{"PowerLimit": {"CorrectionInMs": 1000, "LimitException":
                                                                 "HardPowerOff", "LimitInWatts": 1205}}]}) == 1205
