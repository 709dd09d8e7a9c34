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

from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(ROOT, "lab", "bmc"))

import redfish_bmc  # noqa: E402  (path set above)
from ansible.module_utils.redfish_power import cooling_summary, power_summary  # noqa: E402

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
