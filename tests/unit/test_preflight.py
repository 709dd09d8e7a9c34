"""filter_plugins/preflight.py: the preflight rules as one function over an inventory (groups, hostvars).

The broken-inventory corpus (tests/bad_inventories, run through Ansible by tests/integration) covers each rule
end to end; these tests cover the function's contract: every finding names a host and never a secret value,
one broken check never hides the others, and inventories we never wrote (hypothesis) give findings, never a
traceback."""

import os
import sys

from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "filter_plugins"))

import preflight  # noqa: E402
import yaml  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
PROFILES = yaml.safe_load(open(os.path.join(ROOT, "playbooks", "vars", "hardware_profiles.yml")))["hardware_profiles"]
SECRET = "pw-S3CRET-value"


def inventory():
    rails = [{"name": "rail0", "subnet": "198.18.1.0/24", "mtu": 9000}]
    common = {"mgmt_subnet": "198.18.0.0/24", "rdma_rails": rails, "bmc_password": SECRET}
    hostvars = {
        "gpu-a1": dict(common, ansible_host="198.18.0.11", node_index=0, hardware_profile="hgx-h100-8gpu"),
        "gpu-b1": dict(common, ansible_host="198.18.0.21", node_index=1, hardware_profile="pcie-l40s-4gpu"),
        "lb-1": dict(common, ansible_host="198.18.0.5"),
    }
    groups = {"all": ["gpu-a1", "gpu-b1", "lb-1"], "gpu_nodes": ["gpu-a1", "gpu-b1"], "rack_a": ["gpu-a1"],
              "rack_b": ["gpu-b1"], "lb": ["lb-1"]}
    return groups, hostvars


SETTINGS = {"profiles": PROFILES, "required_secrets": ["bmc_password"], "ansible_version": "2.19.4",
            "supported_ansible_min": "2.19", "python_version": "3.11.2", "supported_python_min": "3.10",
            "roles_dir": os.path.join(ROOT, "roles")}


def report(groups, hostvars, **settings):
    return preflight.preflight_report(groups, hostvars, dict(SETTINGS, **settings))


def test_a_good_inventory_has_no_finding():
    assert report(*inventory()) == []


def test_every_problem_is_listed_one_line_each():
    groups, hostvars = inventory()
    hostvars["gpu-b1"]["node_index"] = 0
    hostvars["lb-1"]["ansible_host"] = "198.18.7.5"
    hostvars["gpu-a1"]["bmc_password"] = ""
    assert report(groups, hostvars) == [
        "gpu-a1, gpu-b1: node_index 0 is used by 2 GPU nodes",
        "gpu-a1: secret bmc_password is empty",
        "lb-1: ansible_host 198.18.7.5 is outside mgmt_subnet 198.18.0.0/24",
    ]


def test_a_broken_check_is_a_finding_and_the_others_still_run(monkeypatch):
    def broken(ctx):
        raise KeyError("boom")
        yield  # pragma: no cover
    monkeypatch.setattr(preflight, "CHECKS", [broken] + preflight.CHECKS)
    groups, hostvars = inventory()
    hostvars["gpu-a1"]["node_index"] = -3
    assert report(groups, hostvars) == [
        "gpu-a1: node_index '-3' is not an integer of 0 or more",
        "preflight: check broken could not run: KeyError: 'boom'"]


def test_a_variable_that_cannot_be_evaluated_is_named():
    class Vars(dict):
        def __getitem__(self, key):
            if key == "hardware_profile":
                raise ValueError("'profile_of_rack' is undefined")
            return dict.__getitem__(self, key)
    groups, hostvars = inventory()
    hostvars["gpu-a1"] = Vars(hostvars["gpu-a1"])
    assert "gpu-a1: hardware_profile cannot be evaluated: 'profile_of_rack' is undefined" in report(groups, hostvars)


def test_role_argument_specs_are_checked_for_what_a_host_sets():
    groups, hostvars = inventory()
    hostvars["gpu-b1"]["gpu_power_limit_watts"] = "lots"
    lines = report(groups, hostvars)
    assert len(lines) == 1 and lines[0].startswith(
        "gpu-b1: gpu_power_limit_watts='lots' does not match roles/gpu_power/meta/argument_specs.yml: "), lines


def test_a_node_cap_below_the_node_floor_names_rack_nodes_cap_and_floor():
    """The issue's cases: a rack budget of 8 W, and a 3,750 W share for eight GPUs set to 600 W (4,800 W alone)."""
    groups, hostvars = inventory()
    groups["rack_a"] = ["gpu-a1", "gpu-a2"]
    groups["gpu_nodes"].append("gpu-a2")
    groups["all"].append("gpu-a2")
    hostvars["gpu-a2"] = dict(hostvars["gpu-a1"], ansible_host="198.18.0.12", node_index=2)
    for host in ("gpu-a1", "gpu-a2", "gpu-b1"):
        hostvars[host]["bmc_power_address"] = "bmc-%s.example.net" % host
    for host in ("gpu-a1", "gpu-a2"):
        hostvars[host]["rack_power_budget_watts"] = 8
    assert report(groups, hostvars) == [
        "gpu-a1, gpu-a2: rack_a: node cap 4 W (rack_power_budget_watts=8 shared by 2 nodes) is below the node's "
        "floor of 10200 W (8 GPUs x 700 W + non_gpu_watts 4600 W of hgx-h100-8gpu)"]
    for host in ("gpu-a1", "gpu-a2"):
        hostvars[host].update(rack_power_budget_watts=7500, gpu_power_limit_watts=600)
    assert report(groups, hostvars) == [
        "gpu-a1, gpu-a2: rack_a: node cap 3750 W (rack_power_budget_watts=7500 shared by 2 nodes) is below the "
        "node's floor of 9400 W (8 GPUs x 600 W + non_gpu_watts 4600 W of hgx-h100-8gpu)"]
    hostvars["gpu-a1"]["bmc_power_node_cap_watts"] = 9400  # exactly the floor: the GPUs and the rest fit
    hostvars["gpu-b1"].update(bmc_power_node_cap_watts=2000, gpu_power_limits_watts={0: 300})
    assert report(groups, hostvars) == [
        "gpu-a2: rack_a: node cap 3750 W (rack_power_budget_watts=7500 shared by 2 nodes) is below the "
        "node's floor of 9400 W (8 GPUs x 600 W + non_gpu_watts 4600 W of hgx-h100-8gpu)",
        "gpu-b1: rack_b: node cap 2000 W (bmc_power_node_cap_watts=2000) is below the node's floor of 2750 W "
        "(GPU limits adding up to 1350 W + non_gpu_watts 1400 W of pcie-l40s-4gpu)",
        "rack_a: node caps (gpu-a1 9400 W, gpu-a2 3750 W) add up to 13150 W, over rack_power_budget_watts=7500 W by "
        "5650 W"]
    for host in ("gpu-a1", "gpu-a2"):
        hostvars[host].update(rack_power_budget_watts=20000, bmc_power_node_cap_watts=0)
    hostvars["gpu-b1"]["bmc_power_node_cap_watts"] = 2750
    assert report(groups, hostvars) == []


def test_a_negative_node_cap_is_named():
    groups, hostvars = inventory()
    hostvars["gpu-b1"]["bmc_power_node_cap_watts"] = -5
    assert report(groups, hostvars) == [
        "gpu-b1: bmc_power_node_cap_watts=-5 is not 0 (the rack budget's even share, or no cap) or a positive number "
        "of watts"]


def test_bmc_addresses_are_addresses_or_names_and_unique():
    groups, hostvars = inventory()
    hostvars["gpu-a1"]["bmc_power_address"] = "198.18.8.312"
    hostvars["gpu-b1"]["bmc_power_address"] = "10.20.0.11"
    hostvars["lb-1"]["bmc_power_address"] = "10.20.0.11"
    assert report(groups, hostvars) == [
        "gpu-a1: bmc_power_address '198.18.8.312' is neither an IP address nor a DNS name (RFC 1123 labels of "
        "letters, digits and inner hyphens; a name never ends in an all-digit label)",
        "gpu-b1, lb-1: bmc_power_address 10.20.0.11 is used by 2 hosts (one BMC per node)"]
    # names compare without case or trailing dot; IPv6 and names pass
    hostvars["gpu-a1"]["bmc_power_address"] = "BMC-A1.example.net."
    hostvars["gpu-b1"]["bmc_power_address"] = "bmc-a1.example.net"
    hostvars["lb-1"]["bmc_power_address"] = "fd00::11"
    assert report(groups, hostvars) == [
        "gpu-a1, gpu-b1: bmc_power_address bmc-a1.example.net is used by 2 hosts (one BMC per node)"]
    for bad in ("bmc_a1", "-bmc", "10.0.0.1:443", "https://bmc-a1", "bmc..example", 7):
        hostvars["gpu-b1"]["bmc_power_address"] = bad
        assert report(groups, hostvars) == [
            "gpu-b1: bmc_power_address %r is neither an IP address nor a DNS name (RFC 1123 labels of letters, "
            "digits and inner hyphens; a name never ends in an all-digit label)" % (bad,)], bad


def test_a_node_that_gets_a_cap_has_a_bmc_to_set_it_through():
    groups, hostvars = inventory()
    hostvars["gpu-a1"]["rack_power_budget_watts"] = 11000
    hostvars["gpu-b1"]["bmc_power_node_cap_watts"] = 3000
    assert report(groups, hostvars) == [
        "gpu-a1: rack_a: gets a node cap of 11000 W (from rack_power_budget_watts) but bmc_power_address is not set: "
        "no BMC to set it through",
        "gpu-b1: rack_b: gets a node cap of 3000 W (from bmc_power_node_cap_watts) but bmc_power_address is not set: "
        "no BMC to set it through"]
    hostvars["gpu-a1"]["bmc_power_address"] = "10.20.0.11"
    hostvars["gpu-b1"]["bmc_power_address"] = "bmc-b1"
    assert report(groups, hostvars) == []


def test_thermal_overrides_stay_below_the_gpus_own_slowdown():
    groups, hostvars = inventory()
    hostvars["mon-1"] = dict(hostvars["lb-1"], ansible_host="198.18.0.6")
    groups["all"].append("mon-1")
    for host in groups["all"]:
        hostvars[host]["bmc_power_gpu_temperature_c"] = {"hgx-h100-8gpu": {"slowdown": 95, "alert": 92}}
    assert report(groups, hostvars) == [
        "gpu-a1, gpu-b1, lb-1, mon-1: hgx-h100-8gpu: bmc_power_gpu_temperature_c slowdown=95 is above the profile's "
        "temperature_c.slowdown=87, where the GPU itself slows down (an override may lower it, never raise it)"]
    for host in groups["all"]:
        hostvars[host]["bmc_power_gpu_temperature_c"] = {"hgx-h100-8gpu": {"alert": 87}, "hgx-x1": {"alert": 80}}
    assert report(groups, hostvars) == [
        "gpu-a1, gpu-b1, lb-1, mon-1: bmc_power_gpu_temperature_c names hgx-x1, which is not a hardware profile",
        "gpu-a1: hgx-h100-8gpu: temperature_c.alert=87 must be below temperature_c.slowdown=87"]
    for host in groups["all"]:
        hostvars[host]["bmc_power_gpu_temperature_c"] = {"hgx-h100-8gpu": {"slowdown": 80, "alert": 75}}
    assert report(groups, hostvars) == []


def test_every_profile_states_its_non_gpu_draw():
    assert all(preflight.profile_problems(p) == [] for p in PROFILES.values())
    profile = dict(PROFILES["hgx-h100-8gpu"])
    del profile["non_gpu_watts"]
    assert preflight.profile_problems(profile) == [
        "non_gpu_watts is missing (the watts the node draws besides its GPUs at its maximum: an integer of 0 or more)"]
    assert preflight.profile_problems(dict(profile, non_gpu_watts="4.6 kW")) == [
        "non_gpu_watts='4.6 kW' is not the watts the node draws besides its GPUs at its maximum: an integer of 0 or "
        "more"]


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.text(max_size=12),
                   st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
KEYS = ("ansible_host", "mgmt_subnet", "node_index", "hardware_profile", "rdma_rails", "bmc_password",
        "preflight_required_secrets", "rack_power_budget_watts", "bmc_power_node_cap_watts", "gpu_power_limit_watts",
        "gpu_power_persistence_mode", "inference_runtime_port", "bmc_power_address", "bmc_power_gpu_temperature_c",
        "gpu_power_limits_watts")


@given(host=st.sampled_from(["gpu-a1", "gpu-b1", "lb-1"]), key=st.sampled_from(KEYS), value=VALUES)
def test_any_value_anywhere_gives_findings_not_a_traceback(host, key, value):
    groups, hostvars = inventory()
    hostvars[host][key] = value
    lines = report(groups, hostvars)
    assert all(isinstance(line, str) and ": " in line for line in lines)
    assert not any("could not run" in line for line in lines), lines
    assert not any(SECRET in line for line in lines), lines


def test_an_undefined_variable_is_a_finding_naming_it_never_a_check_that_cannot_run():
    """ansible-core hands a variable whose template names an undefined one (a vaulted file not passed) over as
    a marker, alone or inside a list; every check reading it gets a finding that names host and variable."""
    import jinja2
    groups, hostvars = inventory()
    hostvars["lb-1"]["inference_lb_tls_certificate"] = jinja2.StrictUndefined(name="vault_inference_lb_certificate")
    hostvars["gpu-a1"]["rdma_rails"] = [{"name": "rail0", "subnet": jinja2.StrictUndefined(name="vault_rail0"),
                                         "mtu": 9000}]
    lines = report(groups, hostvars)
    assert "lb-1: inference_lb_tls_certificate cannot be evaluated: 'vault_inference_lb_certificate' is undefined" \
        in lines, lines
    assert "gpu-a1: rdma_rails cannot be evaluated: 'vault_rail0' is undefined" in lines, lines
    assert not any("could not run" in line for line in lines), lines


def test_results_say_what_each_check_family_read():
    results = preflight.preflight_results(*inventory(), SETTINGS)
    assert results["problems"] == []
    assert [line.split(":")[0] for line in results["checked"]] == [
        "controller", "host names", "management addresses", "GPU nodes", "RoCE rails", "secrets",
        "hardware profiles", "rack power budgets", "node plans", "node caps", "thermal overrides", "BMC addresses",
        "inference settings", "role arguments"]
    assert "GPU nodes: 2, each with a node_index, a known hardware_profile and one rack of 2" in results["checked"]
    assert "RoCE rails: 1 rails for 2 GPU nodes" in results["checked"]
