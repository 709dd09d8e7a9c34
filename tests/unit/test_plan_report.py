"""The cluster plan (filter_plugins/plan_report.py, roles/plan_report, playbooks/plan.yml): every GPU node's plan,
computed once on the controller from the inventory with the function every play's `node_plan` is, shown as JSON
and as a table, reading no secret. And the example inventory's generator (tests/integration/gen_inventory.py)."""

import ipaddress
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
import role_docs
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "filter_plugins"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

import gen_inventory  # noqa: E402
from node_plan import NODE_PLAN_INPUTS, NODE_PLAN_VARIABLES, node_plan_of  # noqa: E402
from plan_report import VARIABLES, plan_gpu_alerts, plan_report, plan_rows, plan_table, promql_node_regex  # noqa: E402,E501

CATALOGUE = yaml.safe_load((REPO / "playbooks" / "vars" / "hardware_profiles.yml").read_text())
PROFILES, THRESHOLDS = CATALOGUE["hardware_profiles"], CATALOGUE["acceptance_thresholds"]
RAILS = [{"name": "rail0", "subnet": "198.18.1.0/24", "mtu": 9000},
         {"name": "rail1", "subnet": "198.18.2.0/24", "mtu": 9000, "offset": 20}]
SECRETS = {"bmc_username": "plan-user-S3CRET", "bmc_password": "plan-pass-S3CRET",
           "inference_lb_tls_private_key": "-----BEGIN PRIVATE KEY-----S3CRET"}
SETTINGS = {"cluster": "unit", "acceptance_thresholds": THRESHOLDS, "interface_match": "by_name"}


class GuardedVars(Mapping):
    """A host's variables as hostvars gives them, except that reading a secret fails the test."""

    def __init__(self, data):
        self._data = data

    def __getitem__(self, key):
        assert key not in SECRETS, "the plan read the secret %s" % key
        return self._data[key]

    def __iter__(self):
        raise AssertionError("the plan listed every variable of a host instead of reading the ones it needs")

    def __len__(self):
        return len(self._data)

    def __contains__(self, key):
        return key in self._data


def cluster():
    """Two racks: rack_a (two H100 nodes at a rack share; one with its own netdev, one with an overridden rail
    address), rack_b (an A100 with its own cap)."""
    common = dict(SECRETS, rdma_rails=RAILS, rdma_roce_rail_interfaces={"rail0": "ens1np0", "rail1": "ens2np0"},
                  gpu_power_limit_watts=600)
    hosts = {
        "gpu-a1": dict(common, ansible_host="198.18.0.11", bmc_power_address="198.18.128.11", node_index=0,
                       hardware_profile="hgx-h100-8gpu", group_names=["gpu_nodes", "rack_a"],
                       rack_power_budget_watts=24000),
        "gpu-a2": dict(common, ansible_host="198.18.0.12", bmc_power_address="198.18.128.12", node_index=1,
                       hardware_profile="hgx-h100-8gpu", group_names=["gpu_nodes", "rack_a"],
                       rack_power_budget_watts=24000, rdma_rail_addresses={"rail1": "198.18.2.200"},
                       rdma_roce_rail_interfaces={"rail0": "ens9np0", "rail1": "ens2np0"}),
        "gpu-b1": dict(common, ansible_host="198.18.0.21", bmc_power_address="198.18.128.21", node_index=2,
                       hardware_profile="hgx-a100-8gpu", group_names=["gpu_nodes", "rack_b"],
                       gpu_power_limit_watts=400, bmc_power_node_cap_watts=6500),
    }
    groups = {"all": list(hosts), "gpu_nodes": list(hosts), "rack_a": ["gpu-a1", "gpu-a2"], "rack_b": ["gpu-b1"]}
    return dict((h, GuardedVars(v)) for h, v in hosts.items()), groups


def rows_of(hostvars, groups):
    return dict((r["node"], r) for r in plan_rows(list(hostvars), hostvars, groups, PROFILES, SETTINGS))


# --- one plan: the variable every play reads and the rows of the cluster plan ------------------------------------

def _node_plan_definition():
    return yaml.safe_load((REPO / "playbooks" / "vars" / "hardware_profiles.yml").read_text())


def test_the_node_plan_variable_passes_exactly_the_inputs_node_plan_of_reads():
    """Each keyword of the variable `node_plan` is `<arg>=<variable> | default(<value>)` as NODE_PLAN_INPUTS says,
    and the variables it and hardware_catalogue read are NODE_PLAN_VARIABLES."""
    data = _node_plan_definition()
    text = data["node_plan"]
    literal = {"none": None, "[]": [], "{}": {}, "0": 0, "''": "", "'rack_'": "rack_"}
    keywords = re.findall(r"(\w+)=(\w+) \| default\(([^)]*)\)", text)
    assert sorted((arg, name, literal[default]) for arg, name, default in keywords) == sorted(NODE_PLAN_INPUTS)
    read = set(re.findall(r"\b([a-z_]+) \| ", text + data["hardware_catalogue"]))
    read |= set(re.findall(r"combine\((\w+) \|", text + data["hardware_catalogue"]))
    assert read | {"group_names"} == set(NODE_PLAN_VARIABLES) | {"hardware_catalogue", "hardware_profiles",
                                                                 "acceptance_thresholds"}
    assert "group_names" in text and "groups=groups" in text


@pytest.mark.parametrize("host_vars", [
    {"hardware_profile": "hgx-h100-8gpu", "node_index": 0, "group_names": ["gpu_nodes", "rack_a"]},
    {"hardware_profile": "hgx-b999", "node_index": 7, "group_names": ["gpu_nodes", "row_z"], "rdma_rails": RAILS,
     "rdma_rail_addresses": {"rail1": "198.18.2.99"}, "rack_group_prefix": "row_", "gpu_power_limits_watts": {0: 500},
     "gpu_power_node_budget_watts": 3000, "bmc_power_node_cap_watts": 7000, "rack_power_budget_watts": 12000,
     "bmc_power_gpu_temperature_c": {"hgx-b999": {"alert": 80}}, "node_verify_driver_version": "570.133.20",
     "hardware_profiles_extra": {"hgx-b999": dict(PROFILES["hgx-h100-8gpu"], gpu_count=4, acceptance_model="B999")},
     "acceptance_thresholds_extra": {"B999": {"nccl_single_node_busbw_gbps": 1.0}}},
], ids=["defaults", "every-input-set"])
def test_node_plan_of_is_the_plan_every_play_templates(host_vars):
    """Ansible templating `{{ node_plan }}` in a play of the host and node_plan_of over the host's variables give
    the same plan, every input set to something other than its default included."""
    loader = DataLoader()
    variables = loader.load_from_file(str(REPO / "playbooks" / "vars" / "hardware_profiles.yml"),
                                      trusted_as_template=True)
    groups = {"rack_a": ["gpu-z1"], "row_z": ["gpu-z1", "gpu-z2"]}
    variables.update(host_vars, inventory_hostname="gpu-z1", groups=groups)
    from ansible.plugins.loader import filter_loader, init_plugin_loader  # pylint: disable=import-outside-toplevel
    if not any(type(finder).__name__ == "_AnsibleCollectionFinder" for finder in sys.meta_path):
        init_plugin_loader()  # once per process (test_node_plan.py may have done it)
    filter_loader.add_directory(str(REPO / "filter_plugins"))
    templated = Templar(loader=loader, variables=variables).template(trust_as_template("{{ node_plan }}"))
    direct = node_plan_of("gpu-z1", host_vars, groups, PROFILES, THRESHOLDS)
    assert json.loads(json.dumps(templated, default=str)) == json.loads(json.dumps(direct, default=str))


def test_a_row_has_what_the_plan_shows():
    hostvars, groups = cluster()
    rows = rows_of(hostvars, groups)
    a1, a2, b1 = rows["gpu-a1"], rows["gpu-a2"], rows["gpu-b1"]
    assert (a1["rack"], a1["node_index"], a1["profile"], a1["fabric_manager"]) == ("rack_a", 0, "hgx-h100-8gpu", True)
    assert a1["rails"] == [
        {"name": "rail0", "interface": "ens1np0", "address": "198.18.1.11", "subnet": "198.18.1.0/24", "offset": 11,
         "mtu": 9000, "address_from": "rule"},
        {"name": "rail1", "interface": "ens2np0", "address": "198.18.2.20", "subnet": "198.18.2.0/24", "offset": 20,
         "mtu": 9000, "address_from": "rule"}]
    assert [(r["interface"], r["address"], r["address_from"]) for r in a2["rails"]] == [
        ("ens9np0", "198.18.1.12", "rule"), ("ens2np0", "198.18.2.200", "rdma_rail_addresses")]
    assert a1["gpu_limits_watts"] == dict((str(i), 600) for i in range(8)) and a1["gpu_limit_watts"] == 600
    assert (a1["node_cap_watts"], a1["node_cap_from"], a1["rack_budget_watts"], a1["rack_nodes"],
            a1["rack_share_watts"]) == (12000, "rack share", 24000, 2, 12000)
    assert (b1["node_cap_watts"], b1["node_cap_from"], b1["rack_share_watts"]) == (6500, "bmc_power_node_cap_watts",
                                                                                   None)
    assert a1["thermal_c"] == {"alert": 85, "slowdown": 87} and b1["thermal_c"] == {"alert": 85, "slowdown": 89}
    assert (a1["bmc_address"], a1["management_address"]) == ("198.18.128.11", "198.18.0.11")
    assert all(not r["problems"] for r in rows.values())


def test_the_plan_never_reads_a_secret():
    """GuardedVars fails on any secret read; and no secret value is anywhere in what the playbook writes."""
    hostvars, groups = cluster()
    report = plan_report(list(hostvars), hostvars, groups, PROFILES, SETTINGS)
    assert not set(VARIABLES) & set(SECRETS)
    for value in SECRETS.values():
        assert value not in report["json"] and value not in report["table"]


def test_a_node_whose_plan_cannot_be_computed_is_a_problem_and_the_others_are_still_shown():
    hostvars, groups = cluster()
    hostvars["gpu-a2"] = GuardedVars(dict(hostvars["gpu-a2"]._data, hardware_profile="hgx-h999"))
    hostvars["gpu-b1"] = GuardedVars(dict(hostvars["gpu-b1"]._data, gpu_power_limit_watts=900))
    report = plan_report(list(hostvars), hostvars, groups, PROFILES, SETTINGS)
    assert report["problems"] == [
        "gpu-a2: hardware_profile=hgx-h999 is not a key of hardware_profiles (known: hgx-a100-8gpu, hgx-h100-8gpu, "
        "pcie-l40s-4gpu)",
        "gpu-b1: gpu_power_limit_watts=900 is above the 100-500 W range of hgx-a100-8gpu"]
    document = json.loads(report["json"])
    assert [n["node"] for n in document["nodes"]] == ["gpu-a1", "gpu-a2", "gpu-b1"] and document["problems"] == 2
    assert document["nodes"][0]["node_cap_watts"] == 12000
    assert report["table"].rstrip().endswith("\n".join(report["problems"]))


def test_what_a_node_needs_to_apply_its_plan_is_a_problem():
    """A rail without a netdev (rdma_roce's by_name, its default, or by_mac) and a cap without a BMC to set it."""
    hostvars, groups = cluster()
    data = dict(hostvars["gpu-a1"]._data, rdma_roce_rail_interfaces={"rail0": "ens1np0"})
    del data["bmc_power_address"]
    hostvars["gpu-a1"] = GuardedVars(data)
    problems = rows_of(hostvars, groups)["gpu-a1"]["problems"]
    assert problems == ["rdma_roce_rail_interfaces has no netdev name for rail rail1 (rdma_roce_interface_match=by_name)",
                        "node cap 12000 W but no bmc_power_address to set it through"]
    hostvars["gpu-a1"] = GuardedVars(dict(data, rdma_roce_interface_match="by_port", bmc_power_address="198.18.128.11"))
    assert rows_of(hostvars, groups)["gpu-a1"]["problems"] == [
        "rdma_roce_interface_match=by_port is not by_name, by_mac or by_subnet"]
    hostvars["gpu-a1"] = GuardedVars(dict(data, rdma_roce_interface_match="by_subnet", bmc_power_address="198.18.128.11"))
    row = rows_of(hostvars, groups)["gpu-a1"]
    assert row["problems"] == [] and [r["interface"] for r in row["rails"]] == ["by subnet", "by subnet"]


def test_a_variable_that_cannot_be_evaluated_is_that_nodes_problem():
    class Broken(GuardedVars):
        def __getitem__(self, key):
            if key == "rdma_rails":
                raise ValueError("'vault_rails' is undefined")
            return super().__getitem__(key)

    hostvars, groups = cluster()
    hostvars["gpu-a1"] = Broken(hostvars["gpu-a1"]._data)
    rows = rows_of(hostvars, groups)
    assert rows["gpu-a1"]["problems"] == ["the plan cannot be computed: ValueError: 'vault_rails' is undefined"]
    assert rows["gpu-a2"]["problems"] == []


def test_the_table_has_one_line_per_node_with_each_rails_netdev_and_address():
    hostvars, groups = cluster()
    table = plan_table(plan_rows(list(hostvars), hostvars, groups, PROFILES, SETTINGS), "unit").splitlines()
    head = next(i for i, line in enumerate(table) if line.startswith("node "))
    assert table[0].startswith("Plan of unit: 3 GPU node(s) in 2 rack(s)")
    assert "  rail1: 198.18.2.0/24, offset 20, MTU 9000" in table
    # every node takes ens2np0 for rail1: in the heading; rail0's netdev differs: in each cell
    assert re.search(r"\brail0\s+rail1 ens2np0$", table[head])
    cells = dict((line.split()[0], line.split()) for line in table[head + 1:head + 4])
    assert cells["gpu-a1"][-3:] == ["ens1np0", "198.18.1.11", "198.18.2.20"]
    assert cells["gpu-a2"][-3:] == ["ens9np0", "198.18.1.12", "198.18.2.200"]
    assert "8 x 600 W" in table[head + 1] and "24000 W / 2 = 12000 W" in table[head + 1]
    assert "6500 W (set)" in table[head + 3] and "85/89 C" in table[head + 3]
    assert len(table) == head + 4


def test_the_default_netdev_match_is_rdma_roces():
    ours = yaml.safe_load((REPO / "roles" / "plan_report" / "vars" / "main.yml").read_text())
    rdma = yaml.safe_load((REPO / "roles" / "rdma_roce" / "defaults" / "main.yml").read_text())
    assert ours["_plan_report_interface_match"] == rdma["rdma_roce_interface_match"]


def test_the_plan_playbook_runs_on_the_controller_only():
    play = yaml.safe_load((REPO / "playbooks" / "plan.yml").read_text())
    assert len(play) == 1 and play[0]["hosts"] == "localhost" and play[0]["connection"] == "local"
    assert play[0]["gather_facts"] is False and play[0]["vars_files"] == ["vars/hardware_profiles.yml"]
    tasks = yaml.safe_load((REPO / "roles" / "plan_report" / "tasks" / "main.yml").read_text())
    assert not any("delegate_to" in t or "loop" in t for t in tasks)


def test_the_roles_defaults_spec_and_readme_agree():
    role_docs.assert_defaults_specified("plan_report")
    role_docs.assert_readme_lists("plan_report", role_docs.spec("plan_report"))


# --- the example inventory and its generated variants -------------------------------------------------------------

EXAMPLE = REPO / "inventories" / "example"


def test_the_generator_writes_the_examples_shape():
    """hosts(4) is the example's hosts.yml; the variants keep its group_vars."""
    assert gen_inventory.hosts(4) == yaml.safe_load((EXAMPLE / "hosts.yml").read_text())


def test_a_thousand_node_variant_fits_the_examples_address_plan(tmp_path):
    dest = gen_inventory.write(tmp_path / "inv", 125)
    assert sorted(p.relative_to(dest) for p in dest.rglob("*") if p.name != "hosts.yml") == \
        sorted(p.relative_to(EXAMPLE) for p in EXAMPLE.rglob("*") if p.name != "hosts.yml")
    racks = yaml.safe_load((dest / "hosts.yml").read_text())["all"]["children"]["gpu_nodes"]["children"]
    nodes = dict((h, v) for rack in racks.values() for h, v in rack["hosts"].items())
    assert len(racks) == 125 and len(nodes) == 1000 and all(len(r["hosts"]) == 8 for r in racks.values())
    cluster_vars = yaml.safe_load((EXAMPLE / "group_vars" / "all" / "cluster.yml").read_text())
    rails = yaml.safe_load((EXAMPLE / "group_vars" / "all" / "rdma.yml").read_text())["rdma_rails"]
    mgmt, bmc = ipaddress.ip_network(cluster_vars["mgmt_subnet"]), ipaddress.ip_network("198.18.128.0/17")
    documentation = ipaddress.ip_network("198.18.0.0/15")
    assert sorted(v["node_index"] for v in nodes.values()) == list(range(1000))
    for key, net in (("ansible_host", mgmt), ("bmc_power_address", bmc)):
        addresses = [ipaddress.ip_address(v[key]) for v in nodes.values()]
        assert len(set(addresses)) == 1000 and all(a in net for a in addresses), key
    for rail in rails:
        net = ipaddress.ip_network(rail["subnet"])
        assert net.subnet_of(documentation) and not net.overlaps(mgmt) and not net.overlaps(bmc)
        assert net.num_addresses - 2 - rail.get("offset", 11) >= 1000, rail  # room for node_index 0-999
    assert mgmt.subnet_of(documentation) and bmc.subnet_of(documentation)
    with pytest.raises(ValueError, match="1-127 racks"):
        gen_inventory.hosts(128)


def test_the_examples_vault_password_is_marked_as_a_dummy():
    assert (EXAMPLE / "DUMMY-vault-password.txt").read_text().startswith("DUMMY-example-only")
    assert (EXAMPLE / "group_vars" / "all" / "vault.yml").read_text().startswith("$ANSIBLE_VAULT;1.1;AES256")


def test_gpu_alerts_group_nodes_by_their_own_plans_threshold():
    """Prometheus's GPU temperature alert reads each node's plan: an override a node sees (whatever group sets
    it) moves that node alone; a node whose plan cannot be computed is left to the profile label."""
    base = {"hardware_profile": "hgx-h100-8gpu", "group_names": ["gpu_nodes", "rack_a"], "rdma_rails": RAILS}
    hostvars = {
        "n1.dc.example": dict(base, node_index=0),
        "n2": dict(base, node_index=1, bmc_power_gpu_temperature_c={"hgx-h100-8gpu": {"alert": 80}}),
        "n3": dict(base, node_index=2, hardware_profile="no-such-profile"),
    }
    groups = {"gpu_nodes": list(hostvars), "rack_a": list(hostvars)}
    alerts = plan_gpu_alerts(list(hostvars), hostvars, groups, PROFILES)
    assert alerts == [{"alert_c": 80, "nodes": ["n2"], "node_regex": "n2"},
                      {"alert_c": 85, "nodes": ["n1.dc.example"], "node_regex": "n1\\\\.dc\\\\.example"}]
    assert promql_node_regex(["b", "a+1"]) == "a\\\\+1|b"
