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
from ansible.module_utils.redfish_power import cooling_summary  # noqa: E402

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
    assert BASE["coolant_inlet_c"] == 32.0


@settings(max_examples=400, deadline=None, derandomize=True)
@given(path=st.sampled_from(PATHS), value=st.sampled_from(BAD_VALUES + (DROP,)))
def test_a_damaged_document_never_reads_healthy_and_different(path, value):
    out = summarize(mutate(DOCS, path, value))
    if out["problems"] or out["leak_detected"]:
        return
    assert out["coolant_inlet_c"] == BASE["coolant_inlet_c"], (path, value, out)
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
