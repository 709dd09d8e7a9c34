"""gpu_power and bmc_power: defaults, argument specs and README tables agree; bad input stops the play
before any change with a message that names the host (or rack) and the variable, and never a secret."""

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

import role_docs

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
POWER_ROLES = ("gpu_power", "bmc_power")
PROFILES = yaml.safe_load((REPO / "playbooks" / "vars" / "hardware_profiles.yml").read_text())["hardware_profiles"]
SECRET = "unit-power-S3CRET-pw"


@pytest.mark.parametrize("role", POWER_ROLES)
def test_every_default_is_specified_with_its_value(role):
    # power defaults are literal: none is templated, so each is copied into the spec
    role_docs.assert_defaults_specified(role, templated_described=False)


@pytest.mark.parametrize("role", POWER_ROLES)
def test_readme_table_lists_the_spec(role):
    spec = role_docs.spec(role)
    if role == "gpu_power":  # inputs it reads from the inventory and the catalogue are named below the table
        spec = {k: v for k, v in spec.items() if k.startswith(role + "_")}
    documented = role_docs.assert_readme_lists(role, spec)
    table = role_docs.readme_table(role)
    for name in documented:
        default = spec[name].get("default")
        if default is not None:
            row = re.search(r"^\| `%s` \| `([^`]*)` \|" % name, table, re.M)
            assert row, name
            shown = yaml.safe_load(row.group(1).replace("\\|", "|"))  # a pipe is escaped in a table cell
            assert shown == default or (default == "" and row.group(1) == '""'), name


_BMC = {"bmc_power_address": "198.19.40.99", "bmc_username": "labadmin", "bmc_password": SECRET}
# (role, variables, message after the host name)
BAD_INPUT = [
    ("gpu_power", {"gpu_power_limit_watts": 701},
     "localhost: gpu_power_limit_watts=701 is above the 200-700 W range of hgx-h100-8gpu"),
    ("gpu_power", {"gpu_power_limit_watts": 150},
     "localhost: gpu_power_limit_watts=150 is below the 200-700 W range of hgx-h100-8gpu"),
    ("gpu_power", {"gpu_power_limits_watts": {"2": 900}},
     "localhost: gpu_power_limits_watts[2]=900 is above the 200-700 W range of hgx-h100-8gpu"),
    ("gpu_power", {"gpu_power_node_budget_watts": 1000},
     "localhost: gpu_power_node_budget_watts=1000 is below the GPUs' minimum sum of 1600 W (8 x 200 W of hgx-h100-8gpu)"),
    ("gpu_power", {"hardware_profile": "hgx-x999"}, "localhost: hardware_profile=hgx-x999 is not a key of hardware_profiles"),
    ("bmc_power", {"bmc_power_address": "198.19.40.99"},
     "localhost: bmc_username and bmc_password not set (needed for the BMC at bmc_power_address=198.19.40.99"),
    ("bmc_power", dict(_BMC, bmc_password=""), "localhost: bmc_password not set (needed for the BMC"),
    ("bmc_power", dict(_BMC, rack_power_budget_watts=5000, bmc_power_node_cap_watts=6000),
     "rack_a: node caps (localhost 6000 W) add up to 6000 W, over rack_power_budget_watts=5000 W by 1000 W"),
    ("bmc_power", dict(_BMC, bmc_power_node_cap_watts=-1),
     "localhost: bmc_power_node_cap_watts=-1 is not 0 or a positive number of watts"),
    ("bmc_power", dict(_BMC, bmc_power_coolant_inlet_c={"min": 40, "max": 30}),
     'localhost: bmc_power_coolant_inlet_c={"min": 40, "max": 30} needs numbers min < max (C)'),
    ("bmc_power", dict(_BMC, bmc_power_fan_vendor="supermicro", bmc_power_fan_profile="turbo"),
     "localhost: bmc_power_fan_profile=turbo is not a supermicro fan profile (expected standard|full|optimal|heavy_io)"),
    ("bmc_power", dict(_BMC, bmc_power_gpu_temperature_c={"hgx-h100-8gpu": {"alert": 90}}),
     "hgx-h100-8gpu: temperature_c.alert=90 must be below temperature_c.slowdown=87"),
]


def _run(tmp_path, index, role, variables):
    inventory = tmp_path / ("inv%d.yml" % index)
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"children": {"rack_a": {"hosts": {
        "localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}}}))
    play = tmp_path / ("play%d.yml" % index)
    play.write_text(json.dumps([{"name": "Apply %s" % role, "hosts": "gpu_nodes", "gather_facts": False,
                                 "vars_files": [str(REPO / "playbooks" / "vars" / "hardware_profiles.yml")],
                                 "roles": [role]}]))
    extra = dict({"hardware_profile": "hgx-h100-8gpu"}, **variables)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_ROLES_PATH=str(ROLES), ANSIBLE_LIBRARY=str(REPO / "library"),
               ANSIBLE_FILTER_PLUGINS=str(REPO / "filter_plugins"), ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory), "--check",
                           str(play), "-e", json.dumps(extra)], cwd=str(REPO), env=env, check=False,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=240)
    return proc


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("power_roles")
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return list(pool.map(lambda a: _run(tmp, a[0], *a[1][:2]), enumerate(BAD_INPUT)))


@pytest.mark.parametrize("index", range(len(BAD_INPUT)), ids=["%s-%s" % (r, "-".join(v)) for r, v, _ in BAD_INPUT])
def test_bad_input_is_rejected_naming_host_and_variable(runs, index):
    proc = runs[index]
    message = BAD_INPUT[index][2]
    out = proc.stdout
    assert proc.returncode == 2, out[-3000:]
    assert message in out.replace("\\n", " ").replace("\n", " "), out[-3000:]
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", out), out[-1500:]
    assert SECRET not in out
