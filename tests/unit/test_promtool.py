"""The monitoring roles' rendered rules and configuration, checked with the real promtool and amtool.

tests/promtool/render.yml renders the prometheus role's configuration (targets from the lab inventory)
and rule files and the alertmanager role's configuration into a temporary directory, with the role
defaults, the hardware profile catalogue, a test profile "lab-test-80c" whose alert temperature is 80 C
and a GPU-hour price of 3.6 USD. The rule unit tests of tests/promtool are copied next to them; then
`promtool test rules`, `promtool check rules`, `promtool check config` and `amtool check-config`.

No lab is needed. promtool and amtool come from PATH, else from .cache/promtool, where the Debian
packages (`prometheus`, `prometheus-alertmanager`) are fetched with `apt-get download` and unpacked with
`dpkg -x`: nothing is installed or started on the test host. Without apt the test fails and says what
to install.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TESTS_DIR = REPO / "tests" / "promtool"
CACHE = REPO / ".cache" / "promtool"
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
PACKAGES = ("prometheus", "prometheus-alertmanager")
RENDER_VARS = ('{"prometheus_kpi_gpu_hour_usd": 3.6, "alertmanager_eda_url": "http://127.0.0.1:5000/alerts", '
               '"hardware_profiles_extra": {"lab-test-80c": {"temperature_c": {"alert": 80, "slowdown": 83}}}}')
RULE_FILES = ("gpu-cluster-alerts.rules.yml", "inference-kpis.rules.yml")

def _run(argv, **kw):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          check=False, **kw)
    return proc.returncode, proc.stdout


def _fetch_debs():
    """Unpack the Debian packages into CACHE (atomically: a half-done unpack never counts)."""
    if not (shutil.which("apt-get") and shutil.which("dpkg")):
        pytest.fail("promtool/amtool are not on PATH and there is no apt-get/dpkg to fetch them: "
                    "install the prometheus and prometheus-alertmanager packages")
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="promtool.", dir=str(CACHE.parent)))
    try:
        debs = work / "debs"
        debs.mkdir()
        rc, out = _run(["apt-get", "download", *PACKAGES], cwd=str(debs))
        if rc != 0 and os.geteuid() == 0:
            # a fresh host may have no package lists yet
            _run(["apt-get", "update"])
            rc, out = _run(["apt-get", "download", *PACKAGES], cwd=str(debs))
        if rc != 0:
            pytest.fail("apt-get download %s failed (run apt-get update as root?):\n%s"
                        % (" ".join(PACKAGES), out[-2000:]))
        for deb in sorted(debs.glob("*.deb")):
            rc, out = _run(["dpkg", "-x", str(deb), str(work)])
            assert rc == 0, "dpkg -x %s: %s" % (deb.name, out)
        shutil.rmtree(str(CACHE), ignore_errors=True)
        os.replace(str(work), str(CACHE))
    finally:
        shutil.rmtree(str(work), ignore_errors=True)


@pytest.fixture(scope="module")
def tools():
    found = {name: shutil.which(name) for name in ("promtool", "amtool")}
    if not all(found.values()):
        cached = {name: CACHE / "usr" / "bin" / name for name in found}
        if not all(p.is_file() for p in cached.values()):
            _fetch_debs()
        found = {name: str(p) for name, p in cached.items()}
    return found


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("promtool")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    rc, log = _run([str(ANSIBLE_PLAYBOOK), "-i", str(REPO / "inventories" / "lab" / "hosts.yml"),
                    "-i", str(TESTS_DIR / "thermal-override.yml"), str(TESTS_DIR / "render.yml"), "-e", "out_dir=%s" % out,
                    "-e", "_prometheus_rules_dir=%s" % out, "-e", RENDER_VARS], cwd=str(REPO), env=env)
    assert rc == 0, log[-3000:]
    for test_file in TESTS_DIR.glob("*.test.yml"):
        shutil.copy(str(test_file), str(out / test_file.name))
    return out


@pytest.mark.parametrize("test_file", sorted(p.name for p in TESTS_DIR.glob("*.test.yml")))
def test_promtool_unit_tests(tools, rendered, test_file):
    rc, out = _run([tools["promtool"], "test", "rules", str(rendered / test_file)])
    assert rc == 0 and "SUCCESS" in out, out


def test_every_alert_is_shipped_and_tested(rendered):
    """The rendered rules and the promtool tests name the same alerts (no list typed here: an alert added to the
    template needs a test that fires it, a test of an alert that is gone fails)."""
    alerts = {r["alert"] for g in yaml.safe_load((rendered / RULE_FILES[0]).read_text())["groups"]
              for r in g["rules"]}
    cases = [t for f in TESTS_DIR.glob("*.test.yml") for case in yaml.safe_load(f.read_text())["tests"]
             for t in case.get("alert_rule_test", [])]
    assert {t["alertname"] for t in cases} == alerts
    for alert in alerts:
        assert any(c["exp_alerts"] for c in cases if c["alertname"] == alert), "%s is never tested firing" % alert


def test_every_recording_rule_is_tested(rendered):
    records = {r["record"] for g in yaml.safe_load((rendered / RULE_FILES[1]).read_text())["groups"]
               for r in g["rules"]}
    tested = {t["expr"] for case in yaml.safe_load((TESTS_DIR / "inference-kpis.test.yml").read_text())["tests"]
              for t in case.get("promql_expr_test", [])}
    assert len(records) == 11
    assert records - tested == set()


@pytest.mark.parametrize("rule_file", RULE_FILES)
def test_promtool_check_rules(tools, rendered, rule_file):
    rc, out = _run([tools["promtool"], "check", "rules", str(rendered / rule_file)])
    assert rc == 0 and "SUCCESS" in out, out


def test_promtool_check_config(tools, rendered):
    config = yaml.safe_load((rendered / "prometheus.yml").read_text())
    node_targets = {c["labels"]["node"]: c for job in config["scrape_configs"] if job["job_name"] == "node"
                    for c in job["static_configs"]}
    assert sorted(node_targets) == ["gpu-a1", "gpu-a2", "gpu-a3", "gpu-b1", "gpu-b2", "gpu-b3", "lb-1", "mon-1"]
    assert node_targets["gpu-b3"]["labels"] == {"node": "gpu-b3", "rack": "rack_b",
                                                "hardware_profile": "pcie-l40s-4gpu"}
    assert node_targets["gpu-b3"]["targets"] == ["198.18.0.23:9100"]
    assert node_targets["mon-1"]["labels"] == {"node": "mon-1"}
    rc, out = _run([tools["promtool"], "check", "config", str(rendered / "prometheus.yml")])
    assert rc == 0 and "SUCCESS" in out and "2 rules found" not in out, out
    for rule_file in RULE_FILES:
        assert str(rendered / rule_file) in out, out


def test_amtool_check_config(tools, rendered):
    rc, out = _run([tools["amtool"], "check-config", str(rendered / "alertmanager.yml")])
    assert rc == 0 and "SUCCESS" in out, out


@pytest.mark.parametrize("labels,receivers", [
    (["severity=warning", "alertname=NodePacketLoss"], "default"),
    (["severity=critical", "alertname=NodeDown"], "critical"),
    # a leak pages at once and the rulebook quarantines the node
    (["severity=page", "alertname=CoolantLeak", "node=gpu-a1"], "eda,page"),
    (["severity=page", "alertname=SomethingElse", "node=gpu-a1"], "page"),
    # a failed remediation goes to people, never back to the rulebook
    (["severity=critical", "alertname=NodeRemediationFailed", "node=gpu-a1"], "critical"),
    # what the rulebook acts on reaches it and still pages people by its severity
    (["severity=critical", "alertname=GPUHealthCheckFailed", "node=gpu-a1"], "eda,critical"),
    (["severity=critical", "alertname=GPUXidErrors", "node=gpu-b1"], "eda,critical"),
], ids=["warning", "critical", "page-leak", "page", "remediation-failed", "eda-health", "eda-xid"])
def test_amtool_walks_the_routing_tree(tools, rendered, labels, receivers):
    config = "--config.file=%s" % (rendered / "alertmanager.yml")
    rc, out = _run([tools["amtool"], "config", "routes", "test", config] + labels)
    assert rc == 0 and out.strip().splitlines()[-1] == receivers, out


def test_a_thermal_override_in_group_vars_gpu_nodes_reaches_prometheus_and_gpu_health(rendered):
    """tests/promtool/thermal-override.yml lowers the A100 alert to 78 C for gpu_nodes: the rendered alert holds
    gpu-b1 and gpu-b2 (A100) at 78 C and the H100 and L40S nodes at their profiles' 85 C, and gpu_health's expected
    values for gpu-b1 (its node_plan, rendered in a play of gpu-b1) carry the same 78 C; the promtool test
    (gpu-cluster-alerts.test.yml) sees gpu-b1 at 84 C alert."""
    rules = yaml.safe_load((rendered / RULE_FILES[0]).read_text())["groups"]
    expr = next(r["expr"] for g in rules for r in g["rules"] if r.get("alert") == "GPUTemperatureHigh")
    assert '(DCGM_FI_DEV_GPU_TEMP{node=~"gpu-b1|gpu-b2"} > 78)' in expr, expr
    assert '(DCGM_FI_DEV_GPU_TEMP{node=~"gpu-a1|gpu-a2|gpu-a3|gpu-b3"} > 85)' in expr, expr
    expected = json.loads((rendered / "gpu_health_expected-gpu-b1.json").read_text())
    assert expected["temperature_alert_c"] == 78, expected
