"""The node plan (filter_plugins/node_plan.py): one place computes what each node should be, and the roles
that provision and the checks that verify read the same values from it."""

import os
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "filter_plugins"))

from fabric import rdma_rail_plan  # noqa: E402
from node_plan import node_plan  # noqa: E402
from power import power_rack_report, power_thermal_profiles  # noqa: E402

CATALOGUE = yaml.safe_load((REPO / "playbooks" / "vars" / "hardware_profiles.yml").read_text())
PROFILES = CATALOGUE["hardware_profiles"]
RAILS = [{"name": "rail0", "subnet": "198.18.1.0/24", "mtu": 9000},
         {"name": "rail1", "subnet": "198.18.2.0/24", "mtu": 9000, "offset": 20}]


def plan(host="gpu-b1", profile="hgx-a100-8gpu", **kw):
    kw.setdefault("group_names", ["gpu_nodes", "rack_b"])
    kw.setdefault("node_index", 3)
    kw.setdefault("rails", RAILS)
    return node_plan(PROFILES, host, profile, acceptance_thresholds=CATALOGUE["acceptance_thresholds"], **kw)


def test_a_node_plan_has_what_the_roles_and_checks_read():
    p = plan()
    assert (p["profile_name"], p["rack"], p["gpu_count"], p["fabric_manager"]) == ("hgx-a100-8gpu", "rack_b", 8, True)
    assert p["topology_expected"] == {"gpu_count": 8, "nic_count": PROFILES["hgx-a100-8gpu"]["nic_count"],
                                      "nic_max_distance": "PXB", "link_code": "NV12", "links_per_gpu": 12,
                                      "nvlinks_active": True}
    assert p["power"]["gpu_limits_watts"] == dict.fromkeys(range(8), 500) and p["power"]["gpu_limit_watts"] == 500
    assert p["gpu_health_expected"]["power_limit_watts"] == 500 and p["power"]["node_cap_watts"] is None
    assert p["acceptance"] == CATALOGUE["acceptance_thresholds"]["A100"]
    assert plan(profile="pcie-l40s-4gpu")["topology_expected"] == {
        "gpu_count": 4, "nic_count": PROFILES["pcie-l40s-4gpu"]["nic_count"],
        "nic_max_distance": PROFILES["pcie-l40s-4gpu"]["nic_max_distance"]}


def test_rail_addresses_are_the_ones_rdma_roce_configures():
    """rdma_roce resolves rails against the node's interfaces (rdma_rail_plan); the plan's addresses, which
    the multi-node NCCL run dials, are the same for every rail, offsets and overrides included."""
    facts = {"interfaces": ["eth1", "eth2"],
             "eth1": {"device": "eth1", "macaddress": "02:00:00:00:00:01", "mtu": 9000,
                      "ipv4": {"address": "198.18.1.14", "netmask": "255.255.255.0"}},
             "eth2": {"device": "eth2", "macaddress": "02:00:00:00:00:02", "mtu": 9000,
                      "ipv4": {"address": "198.18.2.23", "netmask": "255.255.255.0"}}}
    for overrides in ({}, {"rail1": "198.18.2.99"}):
        configured = {r["name"]: r["address"] for r in rdma_rail_plan(RAILS, facts, 3, addresses=overrides)}
        assert plan(rail_addresses=overrides)["rail_addresses"] == configured
    assert plan()["rail_addresses"] == {"rail0": "198.18.1.14", "rail1": "198.18.2.23"}


def test_power_limits_follow_gpu_power_and_reach_gpu_health():
    p = plan(gpu_power_limit_watts=400)
    assert p["gpu_health_expected"]["power_limit_watts"] == 400
    p = plan(gpu_power_limits_watts={0: 450}, gpu_power_node_budget_watts=3600)
    assert p["power"]["gpu_limits_watts"] == dict([(0, 450)] + [(i, 450) for i in range(1, 8)])
    p = plan(gpu_power_limits_watts={0: 300}, gpu_power_node_budget_watts=3600)
    assert p["power"]["gpu_limit_watts"] is None
    assert p["gpu_health_expected"]["power_limits_watts"] == dict([("0", 300)] + [(str(i), 471) for i in range(1, 8)])
    assert "power_limit_watts" not in p["gpu_health_expected"]
    with pytest.raises(AnsibleFilterError, match="gpu-b1: gpu_power_limit_watts=900 is above the 100-500 W range"):
        plan(gpu_power_limit_watts=900)


def test_node_cap_is_explicit_or_the_share_bmc_power_applies():
    groups = {"rack_b": ["gpu-b1", "gpu-b2", "gpu-b3"]}
    assert plan(node_cap_watts=5000, rack_budget_watts=18000, groups=groups)["power"]["node_cap_watts"] == 5000
    shared = plan(rack_budget_watts=18000, groups=groups)["power"]["node_cap_watts"]
    report = power_rack_report(groups, {h: {"rack_power_budget_watts": 18000} for h in groups["rack_b"]})
    assert shared == report[0]["caps"]["gpu-b1"] == 6000
    assert plan(groups=groups)["power"]["node_cap_watts"] is None


def test_the_plan_states_the_node_floor_and_where_its_cap_comes_from():
    """node_min_cap_watts: the GPUs at the limits the plan sets plus the profile's non_gpu_watts, the floor preflight
    holds every node cap to; node_cap_source and rack_share_watts say where the cap comes from."""
    groups = {"rack_b": ["gpu-b1", "gpu-b2", "gpu-b3"]}
    power = plan()["power"]
    assert (power["non_gpu_watts"], power["node_min_cap_watts"]) == (3300, 8 * 500 + 3300)
    assert (power["node_cap_source"], power["rack_share_watts"]) == (None, None)
    power = plan(gpu_power_limits_watts={0: 300}, gpu_power_node_budget_watts=3600, rack_budget_watts=8,
                 groups=groups)["power"]
    assert power["node_min_cap_watts"] == 300 + 7 * 471 + 3300
    # a share of 2 W: the plan caps at it (what bmc_power would write), preflight reports it below the floor
    assert (power["node_cap_watts"], power["node_cap_source"], power["rack_share_watts"]) == (
        2, "rack_power_budget_watts", 2)
    power = plan(rack_budget_watts=2, groups=groups)["power"]
    assert (power["node_cap_watts"], power["node_cap_source"], power["rack_share_watts"]) == (None, None, 0)
    power = plan(node_cap_watts=7300, rack_budget_watts=18000, groups=groups)["power"]
    assert (power["node_cap_watts"], power["node_cap_source"], power["rack_share_watts"]) == (
        7300, "bmc_power_node_cap_watts", None)
    profile = dict(PROFILES["pcie-l40s-4gpu"])
    del profile["non_gpu_watts"]  # a site profile from before the key: no floor (preflight names the missing key)
    site = node_plan({"site-l40s": profile}, "gpu-s1", "site-l40s")
    assert (site["power"]["non_gpu_watts"], site["power"]["node_min_cap_watts"]) == (None, None)


def test_thermal_overrides_reach_the_health_check_as_they_reach_prometheus():
    overrides = {"hgx-a100-8gpu": {"alert": 80}}
    p = plan(thermal_overrides=overrides)
    alerting = power_thermal_profiles(PROFILES, overrides)["hgx-a100-8gpu"]["temperature_c"]["alert"]
    assert p["thermal"]["alert_c"] == p["gpu_health_expected"]["temperature_alert_c"] == alerting == 80


def test_the_rack_comes_from_the_one_prefix():
    assert plan(group_names=["gpu_nodes", "row3_b"], rack_prefix="row3_")["rack"] == "row3_b"
    assert plan(group_names=["gpu_nodes"])["rack"] == ""


@pytest.mark.parametrize("kwargs,message", [
    ({"profile": "hgx-x999"}, "node_plan: gpu-b1: hardware_profile=hgx-x999 is not a key of hardware_profiles"),
    ({"rails": [{"name": "rail0"}]}, "node_plan: gpu-b1: rdma_rails entry {'name': 'rail0'} needs name and subnet"),
    ({"node_cap_watts": "lots"}, "gpu-b1: bmc_power_node_cap_watts"),
])
def test_bad_input_names_host_and_variable(kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message.replace("{", r"\{").replace("}", r"\}")):
        plan(**kwargs)


def test_the_variable_every_play_loads_is_this_plan():
    """playbooks/vars/hardware_profiles.yml defines node_plan from the inventory's variables, as Ansible
    templates it: the same plan as the filter called directly, the site's profiles and rack prefix included."""
    loader = DataLoader()
    variables = loader.load_from_file(str(REPO / "playbooks" / "vars" / "hardware_profiles.yml"),
                                      trusted_as_template=True)
    extra = {"hgx-b999": dict(PROFILES["hgx-h100-8gpu"], gpu_count=4)}
    variables.update({"inventory_hostname": "gpu-z1", "group_names": ["gpu_nodes", "row_z"], "node_index": 7,
                      "hardware_profile": "hgx-b999", "hardware_profiles_extra": extra, "rack_group_prefix": "row_",
                      "rdma_rails": RAILS, "gpu_power_limit_watts": 650, "rack_power_budget_watts": 12000,
                      "groups": {"row_z": ["gpu-z1", "gpu-z2"]}})
    from ansible.plugins.loader import init_plugin_loader
    init_plugin_loader()
    from ansible.plugins.loader import filter_loader
    filter_loader.add_directory(str(REPO / "filter_plugins"))
    templated = Templar(loader=loader, variables=variables).template(trust_as_template("{{ node_plan }}"))
    direct = node_plan(dict(PROFILES, **extra), "gpu-z1", "hgx-b999", ["gpu_nodes", "row_z"], 7, RAILS,
                       rack_prefix="row_", gpu_power_limit_watts=650, rack_budget_watts=12000,
                       groups={"row_z": ["gpu-z1", "gpu-z2"]}, acceptance_thresholds=CATALOGUE["acceptance_thresholds"])
    assert templated["rack"] == "row_z" and templated["gpu_count"] == 4 and templated["power"]["node_cap_watts"] == 6000
    assert templated["gpu_health_expected"] == direct["gpu_health_expected"]
    assert templated["rail_addresses"] == direct["rail_addresses"] == {"rail0": "198.18.1.18", "rail1": "198.18.2.27"}
