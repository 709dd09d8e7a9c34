"""inventories/example (32 HGX H100 nodes in 4 racks) and its 1,000-node variant (125 racks of 8, written by
gen_inventory.py into a temporary directory) through `playbooks/preflight.yml` and the plan command
(`playbooks/plan.yml`), as an operator runs them: exit 0, the plan's JSON what the inventory says (rack, the
eight rail addresses by the rule, GPU limits 600 W, cap = rack share 90,000 / 8 = 11,250 W, Fabric Manager), the
table printed and written, only the controller in the recap (no host contacted), no secret in any output. On the
example the plan is also compared with the node_plan every play reads (node_plan_dump.yml).

Preflight runs once per run on the controller (run_once), so both inventories show one host in the recap and its
check families' lines name every node it read.

The runs start together once per module (each a separate ansible-playbook, two at a time) and the tests check their
results; each run's wall time goes to $GPULAB_TIMES_DIR/example-inventory-runs.json (make test's time directory).
"""

import ipaddress
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_inventory  # noqa: E402

EXAMPLE = REPO / "inventories" / "example"
VAULT_PASSWORD = EXAMPLE / "DUMMY-vault-password.txt"
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
ANSIBLE_VAULT = Path(sys.executable).with_name("ansible-vault")
RECAP_LINE = re.compile(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def _env():
    env = dict(os.environ)
    env.update({"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
                "ANSIBLE_RETRY_FILES_ENABLED": "0"})
    env.pop("GPULAB_TASK_TIMES", None)
    return env


def _run(inventory, playbook, *extra):
    """ansible-playbook as the README gives it: -i <inventory> playbooks/<playbook> and the vault password."""
    start = time.monotonic()
    proc = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(inventory), "--vault-password-file", str(VAULT_PASSWORD),
                           str(playbook)] + list(extra), cwd=REPO, env=_env(), capture_output=True, text=True,
                          timeout=900, check=False)
    return {"rc": proc.returncode, "out": proc.stdout + proc.stderr, "seconds": round(time.monotonic() - start, 1)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("example")
    variant = gen_inventory.write(tmp / "inventory-1000", 125)
    jobs = {
        "preflight-32": (EXAMPLE, REPO / "playbooks" / "preflight.yml"),
        "plan-32": (EXAMPLE, REPO / "playbooks" / "plan.yml", "-e", "plan_report_dir=%s" % (tmp / "plan-32")),
        "plan-1000": (variant, REPO / "playbooks" / "plan.yml", "-e", "plan_report_dir=%s" % (tmp / "plan-1000")),
        "node-plans-32": (EXAMPLE, REPO / "tests" / "integration" / "node_plan_dump.yml",
                          "-e", "node_plan_dump=%s" % (tmp / "node-plans-32.json")),
        "preflight-1000": (variant, REPO / "playbooks" / "preflight.yml"),
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(jobs, pool.map(lambda job: _run(*job), jobs.values())))
    # each run's wall time, for the time report's directory (make test sets it) or beside the runs
    times = Path(os.environ.get("GPULAB_TIMES_DIR") or tmp) / "example-inventory-runs.json"
    times.parent.mkdir(parents=True, exist_ok=True)
    times.write_text(json.dumps(dict((k, v["seconds"]) for k, v in results.items()), indent=2) + "\n")
    results["dir"], results["variant"] = tmp, variant
    return results


@pytest.fixture(scope="module")
def secrets():
    """Every value of the example's vault file, and each line of its PEM blocks: none may ever be printed."""
    plain = subprocess.run([str(ANSIBLE_VAULT), "view", "--vault-password-file", str(VAULT_PASSWORD),
                            str(EXAMPLE / "group_vars" / "all" / "vault.yml")], env=_env(), capture_output=True,
                           text=True, check=True).stdout
    values = []
    for value in yaml.safe_load(plain).values():
        values.append(str(value).strip())
        values += [line for line in str(value).splitlines() if len(line) > 20 and "-----" not in line]
    assert len(values) >= 6
    return values


def _recap(out):
    return dict((host, tuple(int(n) for n in counts)) for host, *counts in RECAP_LINE.findall(out))


def _assert_no_secret(texts, secrets):
    for text in texts:
        for value in secrets:
            assert value not in text, "a secret of the vault file appears in the output"


def _expected_nodes(racks):
    data = gen_inventory.hosts(racks)["all"]["children"]["gpu_nodes"]["children"]
    return dict((host, dict(v, rack=rack)) for rack, group in data.items() for host, v in group["hosts"].items())


def _check_plan(res, plan_dir, racks, secrets):
    out = res["out"]
    assert res["rc"] == 0, out[-3000:]
    assert set(_recap(out)) == {"localhost"}, "the plan ran a task on a host: %s" % sorted(_recap(out))
    document = json.loads((plan_dir / "plan.json").read_text())
    table = (plan_dir / "plan.txt").read_text()
    rails = yaml.safe_load((EXAMPLE / "group_vars" / "all" / "rdma.yml").read_text())["rdma_rails"]
    netdevs = yaml.safe_load((EXAMPLE / "group_vars" / "gpu_nodes" / "rdma.yml").read_text())["rdma_roce_rail_interfaces"]
    expected = _expected_nodes(racks)
    nodes = dict((n["node"], n) for n in document["nodes"])
    assert set(nodes) == set(expected) and document["gpu_nodes"] == racks * 8 and document["problems"] == 0
    assert document["cluster"] == "example-h100" and len(document["racks"]) == racks
    assert all(r == {"budget_watts": 90000, "nodes": 8, "share_watts": 11250} for r in document["racks"].values())
    for host, want in expected.items():
        node = nodes[host]
        assert (node["rack"], node["node_index"], node["profile"]) == (want["rack"], want["node_index"], "hgx-h100-8gpu")
        assert (node["management_address"], node["bmc_address"]) == (want["ansible_host"], want["bmc_power_address"])
        # the rule: host number node_index + offset of the rail's subnet
        assert [(r["name"], r["interface"], r["address"]) for r in node["rails"]] == [
            (rail["name"], netdevs[rail["name"]],
             str(ipaddress.ip_network(rail["subnet"])[want["node_index"] + rail.get("offset", 11)])) for rail in rails]
        assert all(r["mtu"] == 9000 for r in node["rails"])
        assert node["gpu_limits_watts"] == dict((str(i), 600) for i in range(8)) and node["gpu_limit_watts"] == 600
        assert (node["node_cap_watts"], node["node_cap_from"], node["rack_budget_watts"], node["rack_nodes"],
                node["rack_share_watts"]) == (11250, "rack share", 90000, 8, 11250)
        assert node["fabric_manager"] is True and node["thermal_c"] == {"alert": 85, "slowdown": 87}
        assert node["problems"] == []
    # the table: printed as written, one line per node
    lines = table.rstrip("\n").split("\n")
    assert lines[0] == ("Plan of example-h100: %d GPU node(s) in %d rack(s), from the inventory alone (no host was "
                        "contacted)." % (racks * 8, racks))
    head = next(i for i, line in enumerate(lines) if line.startswith("node "))
    assert "rail0 enp26s0np0" in lines[head] and "rail7 enp220s0np0" in lines[head]
    assert len(lines) == head + 1 + racks * 8
    for line in lines:
        assert json.dumps(line) in out, "%r was not printed" % line
    _assert_no_secret([out, table, json.dumps(document)], secrets)
    return lines


def _check_preflight(res, gpu_nodes, secrets):
    assert res["rc"] == 0, res["out"][-3000:]
    assert "Preflight found" not in res["out"]
    recap = _recap(res["out"])
    # run once, on the first host of the run: one line in the recap, nothing failed or unreachable
    assert len(recap) == 1 and all(counts[0] == counts[2] == 0 for counts in recap.values()), recap
    assert "GPU nodes: %d, each with a node_index" % gpu_nodes in res["out"], res["out"][-3000:]
    assert "node caps: %d GPU nodes capped" % gpu_nodes in res["out"], res["out"][-3000:]
    _assert_no_secret([res["out"]], secrets)


def test_the_example_passes_preflight(runs, secrets):
    _check_preflight(runs["preflight-32"], 32, secrets)


def test_the_plan_of_the_example(runs, secrets):
    lines = _check_plan(runs["plan-32"], runs["dir"] / "plan-32", 4, secrets)
    readme = (REPO / "README.md").read_text()
    sample = readme[readme.index("<!-- plan: inventories/example -->"):].split("```")[1].strip("\n").split("\n")[1:]
    for line in sample:
        if line.strip() and line.strip() != "...":
            assert line in lines, "the README's sample line %r is not in the plan of the example" % line


def test_the_plan_of_the_1000_node_variant(runs, secrets):
    _check_plan(runs["plan-1000"], runs["dir"] / "plan-1000", 125, secrets)


def test_the_plan_shown_is_the_node_plan_every_play_reads(runs):
    """node_plan_dump.yml takes, in a play of the GPU nodes, the node_plan every role reads; the plan command's
    JSON has the same rack, index, rail addresses, GPU limits, cap and thermal thresholds for every node."""
    res = runs["node-plans-32"]
    assert res["rc"] == 0, res["out"][-3000:]
    played = json.loads((runs["dir"] / "node-plans-32.json").read_text())
    shown = dict((n["node"], n) for n in json.loads((runs["dir"] / "plan-32" / "plan.json").read_text())["nodes"])
    assert set(played) == set(shown) and len(played) == 32
    for host, plan in played.items():
        node = shown[host]
        assert (node["rack"], node["node_index"], node["profile"], node["fabric_manager"]) == (
            plan["rack"], plan["node_index"], plan["profile_name"], plan["fabric_manager"])
        assert dict((r["name"], r["address"]) for r in node["rails"]) == plan["rail_addresses"]
        assert node["gpu_limits_watts"] == plan["power"]["gpu_limits_watts"]
        assert node["node_cap_watts"] == plan["power"]["node_cap_watts"]
        assert node["thermal_c"] == {"alert": plan["thermal"]["alert_c"], "slowdown": plan["thermal"]["slowdown_c"]}


def test_preflight_passes_the_1000_node_variant(runs, secrets):
    _check_preflight(runs["preflight-1000"], 1000, secrets)
