"""filter_plugins/power.py: per-GPU limits, rack splits and reports, thermal profiles; errors name the
variable and the host or rack."""

import os
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "filter_plugins"))

import power  # noqa: E402  (path set above)

with open(os.path.join(ROOT, "playbooks", "vars", "hardware_profiles.yml")) as _f:
    PROFILES = yaml.safe_load(_f)["hardware_profiles"]
H100 = PROFILES["hgx-h100-8gpu"]   # 8 GPUs, 200-700 W, default 700
L40S = PROFILES["pcie-l40s-4gpu"]  # 4 GPUs, 100-350 W, default 350


def test_filters_are_registered():
    assert set(power.FilterModule().filters()) == {
        "power_gpu_limits", "power_rack_split", "power_rack_report", "power_thermal_profiles"}


@pytest.mark.parametrize("kwargs,expected", [
    ({}, {i: 700 for i in range(8)}),
    ({"limit_watts": 600}, {i: 600 for i in range(8)}),
    ({"node_budget_watts": 4801}, {i: 600 for i in range(8)}),
    ({"node_budget_watts": 99999}, {i: 700 for i in range(8)}),           # clamped to the max
    ({"node_budget_watts": 1600}, {i: 200 for i in range(8)}),            # exactly the minimum sum
    ({"per_gpu": {0: 650, "GPU1": 300}}, {0: 650, 1: 300} | {i: 700 for i in range(2, 8)}),
    ({"per_gpu": {"7": 250}, "limit_watts": 500}, {i: 500 for i in range(7)} | {7: 250}),
    # 4000 W - 700 W fixed = 3300 W over 7 GPUs = 471 W each (floored)
    ({"per_gpu": {0: 700}, "node_budget_watts": 4000}, {0: 700} | {i: 471 for i in range(1, 8)}),
])
def test_gpu_limits(kwargs, expected):
    assert power.power_gpu_limits(H100, host="gpu-a1", **kwargs) == expected


@pytest.mark.parametrize("kwargs,message", [
    ({"limit_watts": 701}, "gpu-a1: gpu_power_limit_watts=701 is above the 200-700 W range of hgx-h100-8gpu"),
    ({"limit_watts": 150}, "gpu-a1: gpu_power_limit_watts=150 is below the 200-700 W range of hgx-h100-8gpu"),
    ({"per_gpu": {3: 900}}, "gpu-a1: gpu_power_limits_watts[3]=900 is above the 200-700 W range"),
    ({"per_gpu": {8: 500}}, "gpu-a1: gpu_power_limits_watts names GPU 8 but hgx-h100-8gpu has GPUs 0-7"),
    ({"per_gpu": {"x": 500}}, "gpu-a1: gpu_power_limits_watts key 'x' is not a GPU index"),
    ({"node_budget_watts": 1599},
     "gpu-a1: gpu_power_node_budget_watts=1599 is below the GPUs' minimum sum of 1600 W (8 x 200 W of hgx-h100-8gpu)"),
    ({"node_budget_watts": 2000, "per_gpu": {0: 700, 1: 700}},
     "gpu-a1: gpu_power_node_budget_watts=2000 is below the GPUs' minimum sum of 2600 W (1400 W fixed + 6 x 200 W"),
    ({"node_budget_watts": 2000, "limit_watts": 300}, "gpu-a1: set gpu_power_limit_watts or gpu_power_node_budget_watts"),
    ({"limit_watts": "lots"}, "gpu-a1: gpu_power_limit_watts='lots' is not a number of watts"),
])
def test_gpu_limits_reject_bad_input(kwargs, message):
    with pytest.raises(AnsibleFilterError) as err:
        power.power_gpu_limits(H100, host="gpu-a1", profile_name="hgx-h100-8gpu", **kwargs)
    assert message in str(err.value)


def test_gpu_limits_need_a_power_range():
    with pytest.raises(AnsibleFilterError, match="gpu-x: the hardware profile has no gpu_count and power_watts"):
        power.power_gpu_limits({"gpu_count": 8}, host="gpu-x")


def test_rack_split_floors_the_share():
    assert power.power_rack_split(10001, ["a", "b", "c"]) == {"a": 3333, "b": 3333, "c": 3333}
    assert power.power_rack_split(5000, []) == {}
    with pytest.raises(AnsibleFilterError, match="rack_b: rack_power_budget_watts=0 must be positive"):
        power.power_rack_split(0, ["x"], "rack_b")


def _hostvars(budget, caps):
    return {h: {"rack_power_budget_watts": budget, "bmc_power_node_cap_watts": c} for h, c in caps.items()}


def test_rack_report_within_and_over_budget():
    racks = {"rack_a": ["a1", "a2", "a3"], "rack_b": ["b1", "b2"], "rack_c": ["c1"]}
    hv = _hostvars(20000, {"a1": 6000, "a2": 6000, "a3": 0})
    hv.update(_hostvars(12000, {"b1": 7000, "b2": 6500}))
    hv["c1"] = {}  # no budget: not reported
    report = power.power_rack_report(racks, hv)
    assert [r["rack"] for r in report] == ["rack_a", "rack_b"]
    a, b = report
    # a3 has no cap of its own: an even share of the rack budget (20000 // 3)
    assert a["caps"] == {"a1": 6000, "a2": 6000, "a3": 6666} and a["total_watts"] == 18666 and not a["over"]
    assert a["text"] == ""
    assert b["over"] and b["total_watts"] == 13500 and b["budget_watts"] == 12000
    assert b["text"] == ("rack_b: node caps (b1 7000 W, b2 6500 W) add up to 13500 W, over "
                         "rack_power_budget_watts=12000 W by 1500 W")


def test_rack_report_rejects_disagreeing_budgets_and_bad_caps():
    hv = _hostvars(20000, {"a1": 1}) | _hostvars(10000, {"a2": 1})
    with pytest.raises(AnsibleFilterError, match="rack_a: the hosts of the rack disagree on rack_power_budget_watts"):
        power.power_rack_report({"rack_a": ["a1", "a2"]}, hv)
    with pytest.raises(AnsibleFilterError, match="a1: bmc_power_node_cap_watts='big' is not a number"):
        power.power_rack_report({"rack_a": ["a1"]}, _hostvars(20000, {"a1": "big"}))


def test_thermal_profiles_use_the_catalogue_and_overrides():
    merged = power.power_thermal_profiles(PROFILES, {"pcie-l40s-4gpu": {"alert": 80}})
    assert merged["hgx-h100-8gpu"]["temperature_c"] == {"slowdown": 87, "alert": 85}
    assert merged["pcie-l40s-4gpu"]["temperature_c"] == {"slowdown": 90, "alert": 80}
    assert merged["pcie-l40s-4gpu"]["gpu_count"] == 4
    assert PROFILES["pcie-l40s-4gpu"]["temperature_c"]["alert"] == 85  # the input is not modified
    # a slowdown may be lowered (alerting earlier), never raised above the GPU's own
    lowered = power.power_thermal_profiles(PROFILES, {"hgx-h100-8gpu": {"slowdown": 84, "alert": 80}})
    assert lowered["hgx-h100-8gpu"]["temperature_c"] == {"slowdown": 84, "alert": 80}


@pytest.mark.parametrize("overrides,message", [
    ({"hgx-h100-8gpu": {"alert": 87}}, "hgx-h100-8gpu: temperature_c.alert=87 must be below temperature_c.slowdown=87"),
    ({"hgx-x999": {"alert": 80}}, "bmc_power_gpu_temperature_c names hgx-x999, which is not a hardware profile"),
    ({"hgx-a100-8gpu": {"alert": "hot"}}, "hgx-a100-8gpu: temperature_c needs numbers slowdown and alert"),
    ({"hgx-h100-8gpu": {"slowdown": 95, "alert": 92}},
     "hgx-h100-8gpu: bmc_power_gpu_temperature_c slowdown=95 is above the profile's temperature_c.slowdown=87, where "
     "the GPU itself slows down (an override may lower it, never raise it)"),
    ({"hgx-h100-8gpu": 83}, "bmc_power_gpu_temperature_c.hgx-h100-8gpu=83 is not a mapping {slowdown, alert}"),
    (["hgx-h100-8gpu"], "bmc_power_gpu_temperature_c=['hgx-h100-8gpu'] is not a mapping of hardware profile names"),
])
def test_thermal_profiles_reject_bad_thresholds(overrides, message):
    with pytest.raises(AnsibleFilterError) as err:
        power.power_thermal_profiles(PROFILES, overrides)
    assert message in str(err.value)
