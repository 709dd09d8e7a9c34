"""The lab end to end: bring it up, converge site.yml, prove idempotence and check mode, inject every
simulated fault and assert verify.yml finds each on the right node and GPU, then tear it down.

Runs against real systemd containers over real SSH; needs root and a Docker engine (make integration
sets both up). KEEP_LAB=1 leaves the lab running afterwards.
"""

import base64
import http.client
import json
import os
import re
import signal
import ssl
import subprocess
import tarfile
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
VAULT = ["--vault-password-file", ".lab/vault-pass", "-e", "@.lab/secrets.vault.yml"]
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
REPORT = ROOT / "reports" / "readiness.json"
PROMETHEUS = "http://198.18.0.41:9090"  # mon-1 in inventories/lab/hosts.yml
LB = "198.18.0.31"  # lb-1; nginx's server name is the host name
ALL_HOSTS = ["gpu-a1", "gpu-a2", "gpu-a3", "gpu-b1", "gpu-b2", "gpu-b3", "lb-1", "mon-1"]
# What a dry run must leave as it found it on a node: packages, files under the configuration and state
# directories (the simulator's GPU state and the BMC's cap included), enabled and running units.
SNAPSHOT = (r"dpkg-query -W -f '${Package} ${Version} ${Status}\n'; "
            r"find /etc /opt /srv /usr/local /var/lib/gpusim /var/lib/labbmc /var/lib/inference-runtime -xdev "
            r"-type f -exec sha256sum {} + 2>/dev/null | sort -k2; "
            r"systemctl list-unit-files --no-legend --state=enabled,masked; "
            r"systemctl list-units --no-legend --plain --state=active --type=service | cut -d' ' -f1")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root and a Docker engine")


def mitogen_env():
    """Mitogen's strategy for the lab's plays, as make lab runs them (LAB_MITOGEN=0: Ansible's own)."""
    if os.environ.get("LAB_MITOGEN", "1") != "1":
        return {}
    import ansible_mitogen.plugins.strategy as strategy
    return {"ANSIBLE_STRATEGY": "mitogen_linear", "ANSIBLE_STRATEGY_PLUGINS": os.path.dirname(strategy.__file__)}


def ansible_env():
    return dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                PATH="%s:%s" % (BIN, os.environ.get("PATH", "")), **mitogen_env())


# The output of the command running now, as it comes: when CI kills a stage that hangs, pytest's captured
# output is lost with it, and scripts/time-report.py prints the end of this file instead.
LIVE = Path(os.environ.get("GPULAB_TIMES_DIR", ROOT / ".cache" / "times")) / "logs" / "integration-lab.live"


def run(*args, check=True):
    LIVE.parent.mkdir(parents=True, exist_ok=True)
    with LIVE.open("w") as live:
        live.write("%s %s\n" % (time.strftime("%H:%M:%S"), " ".join(args)))
        live.flush()
        start = live.tell()
        proc = subprocess.run(list(args), cwd=ROOT, env=ansible_env(), stdout=live, stderr=subprocess.PIPE,
                              text=True, timeout=1800)
    with LIVE.open() as live:
        live.seek(start)
        out = live.read() + proc.stderr
    if check and proc.returncode != 0:
        raise AssertionError("%s exited %d:\n%s" % (" ".join(args), proc.returncode, out[-6000:]))
    return proc.returncode, out


def playbook(*args, check=True):
    return run(str(BIN / "ansible-playbook"), *VAULT, *args, check=check)


def recap(out):
    return {m.group(1): {"ok": int(m.group(2)), "changed": int(m.group(3)),
                         "unreachable": int(m.group(4)), "failed": int(m.group(5))}
            for m in RECAP.finditer(out)}


def report():
    return {row["node"]: row for row in json.loads(REPORT.read_text())["nodes"]}


def set_faults(host, faults):
    playbook("playbooks/lab/faults.yml", "-l", host, "-e", json.dumps({"lab_faults": faults}))


@pytest.fixture(scope="module")
def lab():
    # Nodes start with package lists emptied seconds ago, as from a freshly built golden image.
    run("lab/image/fresh.sh", "--keep", "gpulab-node:lab")
    run("scripts/lab-secrets.sh")
    playbook("playbooks/lab/up.yml")
    playbook("playbooks/lab/simulator.yml")
    playbook("playbooks/lab/apt_repo.yml")
    playbook("playbooks/lab/bmc.yml")
    playbook("playbooks/lab/models.yml")
    yield
    if os.environ.get("KEEP_LAB") != "1":
        run("scripts/lab-down.sh", check=False)


GPU_NODES = ["gpu-a1", "gpu-a2", "gpu-a3", "gpu-b1", "gpu-b2", "gpu-b3"]


def snapshot(host):
    return subprocess.run(["docker", "exec", "gpulab-" + host, "sh", "-c", SNAPSHOT],
                          capture_output=True, text=True, check=True).stdout


# One GPU node of each hardware profile (H100 and A100 HGX, L40S PCIe; both racks), the load balancer and the
# monitoring host: every play and every profile's branch of the roles, at 5 of the lab's 8 hosts' cost.
CHECK_HOSTS = ["gpu-a1", "gpu-b1", "gpu-b3", "lb-1", "mon-1"]


def test_check_diff_on_a_fresh_lab_changes_nothing(lab):
    """Before anything converged: the dry run of the whole site goes through every play without a failure,
    shows its diffs, and leaves every node and the controller as they were."""
    assert not REPORT.exists()
    before = {h: snapshot(h) for h in ALL_HOSTS}
    rc, out = playbook("playbooks/site.yml", "--check", "--diff", "-l", ",".join(CHECK_HOSTS + ["localhost"]))
    hosts = recap(out)
    assert set(hosts) >= set(CHECK_HOSTS), hosts
    assert all(h["failed"] == 0 and h["unreachable"] == 0 for h in hosts.values()), hosts
    assert all(hosts[n]["changed"] > 0 for n in CHECK_HOSTS if n in GPU_NODES), hosts  # a fresh node: all to do
    assert re.search(r"^\+NCCL_IB_HCA=", out, re.M), "no diff of /etc/nccl.conf"  # the template's diff
    for host in ALL_HOSTS:
        after = snapshot(host)
        assert after == before[host], (host, sorted(set(after.splitlines()) ^ set(before[host].splitlines()))[:20])
    assert not REPORT.exists()


def bmc_secrets():
    # stdout only: stderr carries the Python libraries' warnings (cryptography 51 deprecates DSA on import)
    proc = subprocess.run([str(BIN / "ansible-vault"), "view", "--vault-password-file", ".lab/vault-pass",
                           ".lab/secrets.vault.yml"], cwd=ROOT, env=ansible_env(), capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return yaml.safe_load(proc.stdout)


def redfish(host, path, auth):
    """GET a lab BMC resource over HTTPS, verified against the certificate bmc.yml fetched."""
    ctx = ssl.create_default_context(cafile=str(ROOT / ".lab" / "bmc-ca" / ("%s.crt" % host)))
    ctx.check_hostname = False  # the certificate names the BMC's address; urllib is given the same address
    req = urllib.request.Request("https://%s:8443%s" % (ANSIBLE_HOSTS[host], path))
    req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
        return json.load(resp)


ANSIBLE_HOSTS = {"gpu-a1": "198.18.0.11", "gpu-a2": "198.18.0.12", "gpu-a3": "198.18.0.13",
                 "gpu-b1": "198.18.0.21", "gpu-b2": "198.18.0.22", "gpu-b3": "198.18.0.23"}


def lb_ca(tmp_path):
    ca = tmp_path / "lab-ca.crt"
    ca.write_text(subprocess.run(["docker", "exec", "gpulab-lb-1", "cat", "/etc/nginx/tls/lab-ca.crt"],
                                 capture_output=True, text=True, check=True).stdout)
    return ca


def complete(ca, prompt="hi", tls=ssl.TLSVersion.TLSv1_3):
    """One completion through the load balancer, verified against the lab CA; returns (status, answer, TLS)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False  # the certificate names lb-1; we connect to its address and send Host: lb-1
    ctx.minimum_version = ctx.maximum_version = tls
    conn = http.client.HTTPSConnection(LB, 443, context=ctx, timeout=10)
    try:
        body = json.dumps({"model": "lab-tiny", "prompt": prompt, "max_tokens": 3})
        conn.request("POST", "/v1/completions", body=body, headers={"Host": "lb-1", "Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}"), conn.sock.version()
    finally:
        conn.close()


def lb_backends():
    """{node: 'serving' | 'down'} from the load balancer's upstream files."""
    out = subprocess.run(["docker", "exec", "gpulab-lb-1", "sh", "-c",
                          "grep -H '^server' /etc/nginx/inference-backends/*.conf"],
                         capture_output=True, text=True, check=True).stdout
    return {Path(line.split(":", 1)[0]).stem: ("down" if line.rstrip().endswith(" down;") else "serving")
            for line in out.splitlines()}


def test_site_converges_and_every_node_is_ready(lab, tmp_path):
    rc, out = playbook("playbooks/site.yml")
    hosts = recap(out)
    assert set(GPU_NODES) <= set(hosts), out[-3000:]
    assert all(h["failed"] == 0 and h["unreachable"] == 0 for h in hosts.values()), hosts
    rows = report()
    assert sorted(rows) == GPU_NODES
    not_ready = {n: r["reasons"] for n, r in rows.items() if not r["ready"]}
    assert not_ready == {}
    assert "6 of 6 nodes ready" in out
    # Freshly provisioned, every check of every node is ok: no warn (the A100s' Fabric Manager included).
    not_ok = {(n, c): v["reasons"] for n, r in rows.items() for c, v in r["columns"].items() if v["status"] != "ok"}
    assert not_ok == {}
    # Each node's full results carry the profile's real topology.
    a1 = json.loads((ROOT / "reports" / "gpu-a1.json").read_text())
    assert a1["topology"]["gpu_count"] == 8
    assert a1["topology"]["links"]["GPU0"]["GPU1"] == "NV18"
    b1 = json.loads((ROOT / "reports" / "gpu-b1.json").read_text())
    assert b1["topology"]["links"]["GPU3"]["GPU4"] == "NV12"
    # gpu_health read the GPUs through NVML: the pinned nvidia-ml-py loading the driver packages'
    # libnvidia-ml.so.1 (the lab's double answering from the simulator), on every GPU node.
    for node in GPU_NODES:
        details = json.loads((ROOT / "reports" / (node + ".json")).read_text())
        assert details["gpu_source"] == "nvml", (node, details["gpu_source"])
    assert [p["netdev_mtu"] for p in a1["rdma_ports"]] == [9000, 9000]
    # The GPU tools come from the product roles' packages, not from the simulator: nvidia-smi from the driver
    # set (Debian 12 layout), dcgmi from DCGM 4, all_reduce_perf built from the nccl-tests source release, and
    # nvidia-ml-py at its pinned version.
    for node in GPU_NODES:
        found = subprocess.run(["docker", "exec", "gpulab-" + node, "sh", "-c",
                                "dpkg -S /usr/bin/nvidia-smi /usr/bin/dcgmi; readlink /opt/nccl-tests/bin; "
                                "dpkg -S /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1; "
                                "readlink /usr/local/lib/nvidia-ml-py/current; "
                                "ls /usr/local/bin/nvidia-smi /usr/local/bin/dcgmi 2>&1 | grep -c 'No such file'"],
                               capture_output=True, text=True, check=True).stdout.splitlines()
        assert found == ["nvidia-smi: /usr/bin/nvidia-smi", "datacenter-gpu-manager-4-core: /usr/bin/dcgmi",
                         "/opt/nccl-tests/nccl-tests-2.17.6/build-cuda12.2-nccl2.19.3",
                         "libnvidia-ml1: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "12.570.86", "2"], (node, found)
    # rdma_roce applied lossless RoCE through DOCA's tools (the lab's mlnx-tools double) and its check agrees.
    for node in GPU_NODES:
        qos = subprocess.run(["docker", "exec", "gpulab-" + node, "/usr/local/sbin/rdma-roce-qos", "check"],
                             capture_output=True, text=True)
        assert qos.returncode == 0 and "skip" not in qos.stdout, (node, qos.stdout)
        assert len(re.findall(r"^ok: eth\d: trust dscp, pfc 0,0,0,1,0,0,0,0$", qos.stdout, re.M)) == 2, qos.stdout
        assert re.search(r"^ok: mlx5_0: RDMA-CM default ToS 106\b", qos.stdout, re.M), (node, qos.stdout)
        assert "ok: mlx5_1: traffic class 106" in qos.stdout, (node, qos.stdout)
        assert len(re.findall(r"^ok: eth\d: ecn roce_(np|rp) priority 3 = 1$", qos.stdout, re.M)) == 4, qos.stdout
    # gpu_power turned persistence mode on everywhere (the recorded A100/L40S outputs had it off).
    for node, row in rows.items():
        assert not any("persistence_mode" in r for r in row["columns"]["gpus"]["reasons"]), (node, row)
    md = (ROOT / "reports" / "readiness.md").read_text()
    assert "6 of 6 nodes ready." in md and "| GPU0 | X | NV18 |" in md
    assert "| GPU3 | NV12 | NV12 | NV12 | X | NV12 |" in md
    rc, out = run(str(BIN / "ansible"), "gpu_nodes", *VAULT, "-m", "ansible.builtin.command",
                  "-a", "systemctl is-enabled gpu-power-settings.service")
    assert len(re.findall(r"^gpu-\w+ \| CHANGED \| rc=0 >>\nenabled$", out, re.M)) == 6, out
    # bmc_power capped every node through its lab BMC at the rack budget's even share (30600/3, 21900/3 W):
    # read back over HTTPS with the fetched certificate, in the Controls and the Power schema alike.
    secrets = bmc_secrets()
    auth = "%s:%s" % (secrets["bmc_username"], secrets["bmc_password"])
    for node in GPU_NODES:
        chassis = redfish(node, "/redfish/v1/Chassis", auth)["Members"][0]["@odata.id"]
        control = redfish(node, chassis + "/Controls/PowerLimit", auth)
        power = redfish(node, chassis + "/Power", auth)
        want = 10200 if node.startswith("gpu-a") else 7300
        assert control["SetPoint"] == want, (node, control)
        assert power["PowerControl"][0]["PowerLimit"]["LimitInWatts"] == want, (node, power)
    # The inference runtime serves on every node behind the load balancer, over TLS 1.3 only.
    assert lb_backends() == {n: "serving" for n in GPU_NODES}
    ca = lb_ca(tmp_path)
    status, answer, tls = complete(ca)
    assert status == 200 and answer["model"] == "lab-tiny" and answer["system_fingerprint"] == "1.0.0", answer
    assert tls == "TLSv1.3"
    with pytest.raises(ssl.SSLError):
        complete(ca, tls=ssl.TLSVersion.TLSv1_2)


def on_gpu_nodes(cmd):
    for node in GPU_NODES:
        subprocess.run(["docker", "exec", "gpulab-" + node, "sh", "-c", cmd], check=True)


def test_a_run_interrupted_mid_play_converges_on_rerun(lab):
    """Ctrl-C in the middle of the RDMA play, after it rewrote some of what drifted and before it wrote
    /etc/nccl.conf: the same command run again converges every node.

    Ctrl-C is pressed again each second until ansible-playbook exits, as an operator would. One CI run
    saw the first SIGINT have no effect: the play went on to its recap with rc 0. After the first SIGINT,
    ansible-core's handler resets SIGINT to the default, so the second one ends the process."""
    on_gpu_nodes("rm -f /etc/nccl.conf /etc/modules-load.d/rdma.conf")
    cmd = [str(BIN / "ansible-playbook"), *VAULT, "playbooks/site.yml", "--tags", "rdma"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines, presses, done = [], [], threading.Event()

    def press_ctrl_c():
        while len(presses) < 10 and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            presses.append(time.monotonic())
            if done.wait(1.0):
                return

    presser = threading.Thread(target=press_ctrl_c, daemon=True)
    try:
        for line in proc.stdout:
            lines.append(line)
            if not presser.is_alive() and not presses and \
                    line.startswith("TASK [rdma_roce : Write the systemd-networkd rail files]"):
                presser.start()
        rc = proc.wait(timeout=600)
    finally:
        done.set()
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines)
    assert presses and rc != 0, "SIGINT sent %d times, rc %s:\n%s" % (len(presses), rc, out[-3000:])
    # Workers whose parent died stay blocked on the result queue after their task: give any task still in
    # flight 20 s to end, then remove them (they are forks with the playbook's command line).
    time.sleep(20)
    subprocess.run(["pkill", "-KILL", "-f", "bin/ansible-playbook .*playbooks/site.yml --tags rdma$"])
    assert "PLAY RECAP" not in out, out[-3000:]
    missing = subprocess.run(["docker", "exec", "gpulab-gpu-a1", "test", "-e", "/etc/nccl.conf"]).returncode
    assert missing != 0, "the interrupted run got as far as /etc/nccl.conf"
    rc, out = playbook("playbooks/site.yml", "--tags", "rdma")
    hosts = recap(out)
    assert all(hosts[n]["failed"] == 0 and hosts[n]["changed"] > 0 for n in GPU_NODES), hosts
    on_gpu_nodes("grep -q '^NCCL_IB_HCA=' /etc/nccl.conf && test -s /etc/modules-load.d/rdma.conf")


def ansible_runner(tmp_path, play, ident, *args):
    """Run a playbook the way AWX does, through ansible-runner's private_data_dir (env/ in, artifacts/ out);
    returns the artifacts' status and rc, the job events in order, and stdout."""
    pdd = tmp_path / "private_data_dir"
    (pdd / "env").mkdir(parents=True, exist_ok=True)
    (pdd / "env" / "envvars").write_text(yaml.safe_dump({"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                                                         "ANSIBLE_FORCE_COLOR": "0", **mitogen_env()}))
    (pdd / "env" / "cmdline").write_text(" ".join(
        ["--vault-password-file", str(ROOT / ".lab" / "vault-pass"), "-e", "@%s" % (ROOT / ".lab" / "secrets.vault.yml"),
         *args]))
    rc, out = run(str(BIN / "ansible-runner"), "run", str(pdd), "--project-dir", str(ROOT), "-p", play,
                  "--inventory", str(ROOT / "inventories" / "lab"), "--ident", ident, check=False)
    art = pdd / "artifacts" / ident
    events = sorted((json.loads(p.read_text()) for p in (art / "job_events").glob("*.json")),
                    key=lambda e: e["counter"])
    return (art / "status").read_text().strip(), int((art / "rc").read_text()), events, out


def test_site_rerun_through_ansible_runner_changes_nothing(lab, tmp_path):
    status, rc, events, out = ansible_runner(tmp_path, "playbooks/site.yml", "site-rerun")
    assert (status, rc) == ("successful", 0), out[-3000:]
    stats = [e for e in events if e["event"] == "playbook_on_stats"]
    assert len(stats) == 1, [e["event"] for e in events][-5:]
    data = stats[0]["event_data"]
    assert set(data["ok"]) >= set(ALL_HOSTS), data["ok"]
    assert data["changed"] == {} and data["failures"] == {} and data["dark"] == {}, data
    assert not [e for e in events if e["event"] in ("runner_on_failed", "runner_on_unreachable")
                and not e["event_data"].get("ignore_errors")]
    # every task of every play reached each GPU node: the readiness table came out as an event
    assert any("6 of 6 nodes ready" in e.get("stdout", "") for e in events)


def test_lab_up_rerun_changes_nothing(lab):
    for play in ("playbooks/lab/up.yml", "playbooks/lab/simulator.yml", "playbooks/lab/apt_repo.yml",
                 "playbooks/lab/bmc.yml", "playbooks/lab/models.yml"):
        rc, out = playbook(play)
        hosts = recap(out)
        assert hosts and all(h["changed"] == 0 for h in hosts.values()), (play, hosts)


# node -> (faults, {column: [substrings every one of which must appear in that column's reasons]})
FAULTS = {
    "gpu-a1": ({"gpu_missing": [{"gpu": 3}]},
               {"topology": ["gpu_count"], "gpus": ["count"]}),
    "gpu-a2": ({"nvlink_inactive": [{"gpu": 2, "links": [5]}]},
               {"topology": ["GPU2 link 5"]}),
    # gpu-b1 (A100, pre-Hopper NVSwitch) also has its Fabric Manager stopped by hand in the test below.
    "gpu-b1": ({"ecc_uncorrectable": [{"gpu": 1, "count": 4}], "row_remap_pending": [{"gpu": 6}]},
               {"ecc": ["GPU1 ecc", "GPU6 row_remap"],
                "gpus": ["GPU0 fabric", "nvidia-fabricmanager is inactive"]}),
    # gpu-b2's NICs also forget their QoS in the test below (as at a reboot before the boot unit runs).
    "gpu-b2": ({"xid": [{"gpu": 4, "code": 79}], "pcie_degraded": [{"gpu": 0, "width": 8}]},
               {"xid": ["GPU4 xid", "79"], "pcie": ["GPU0 pcie", "x8"],
                "rdma": ["qos_trust: mlnx_qos -i", "trust pcp, expected dscp", "PFC on priorities none, expected [3]"]}),
    "gpu-b3": ({"over_temperature": [{"gpu": 2, "temp": 95}], "rdma_port_down": [{"device": "mlx5_1"}]},
               {"gpus": ["GPU2 temperature"], "rdma": ["mlx5_1"]}),
}


def test_every_injected_fault_is_found_on_the_right_node_and_gpu(lab):
    # Drifts made by hand, as an operator would: a power limit changed with nvidia-smi is a warning,
    # reported on the right GPU and not gating; the Fabric Manager the profile needs, stopped, is a fail.
    a3_smi = ["docker", "exec", "gpulab-gpu-a3", "nvidia-smi", "-i", "1"]
    limit = subprocess.run(a3_smi + ["--query-gpu=power.limit", "--format=csv,noheader,nounits"], check=True,
                           capture_output=True, text=True).stdout.strip()
    try:
        for host, (faults, _) in FAULTS.items():
            set_faults(host, faults)
        subprocess.run(a3_smi + ["-pl", "300"], check=True, capture_output=True)
        subprocess.run(["docker", "exec", "gpulab-gpu-b1", "systemctl", "stop", "nvidia-fabricmanager"], check=True)
        subprocess.run(["docker", "exec", "gpulab-gpu-b2", "rm", "-rf", "/run/gpulab-nic"], check=True)
        rc, out = playbook("playbooks/verify.yml", check=False)
        assert rc != 0, "verify.yml must fail when nodes are not ready"
        rows = report()
        for host, (_, columns) in FAULTS.items():
            row = rows[host]
            assert not row["ready"], host
            failing = {c for c, v in row["columns"].items() if v["status"] in ("fail", "error")}
            assert failing == set(columns), (host, failing, row["reasons"])
            for column, needles in columns.items():
                text = " | ".join(row["columns"][column]["reasons"])
                for needle in needles:
                    assert needle in text, (host, column, needle, text)
        a3 = rows["gpu-a3"]
        assert a3["ready"], a3["reasons"]
        assert a3["columns"]["gpus"]["status"] == "warn"
        assert any("GPU1 power" in r and "300 W" in r for r in a3["columns"]["gpus"]["reasons"]), a3["columns"]["gpus"]
        assert "1 of 6 nodes ready" in out
    finally:
        for host in FAULTS:
            set_faults(host, {})
        subprocess.run(a3_smi + ["-pl", str(int(float(limit)))], check=True, capture_output=True)
        subprocess.run(["docker", "exec", "gpulab-gpu-b1", "systemctl", "start", "nvidia-fabricmanager"], check=True)
        # what the boot unit does after a reboot: apply the lossless-RoCE settings again
        subprocess.run(["docker", "exec", "gpulab-gpu-b2", "systemctl", "restart", "rdma-roce-qos"], check=True)
    rc, out = playbook("playbooks/verify.yml")
    assert all(r["ready"] for r in report().values())


def prometheus(query, at=None):
    params = {"query": query} if at is None else {"query": query, "time": "%.3f" % at}
    url = "%s/api/v1/query?%s" % (PROMETHEUS, urllib.parse.urlencode(params))
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_for(query, want, timeout=120):
    """Poll until the query's result satisfies want (the lab scrapes every 5 s); return it."""
    deadline = time.monotonic() + timeout
    while True:
        result = prometheus(query)
        if want(result) or time.monotonic() > deadline:
            return result
        time.sleep(3)


def test_prometheus_scrapes_every_node_and_shows_an_injected_fault(lab):
    up = {r["metric"]["node"]: r for r in prometheus('up{job="node"}')}
    assert sorted(up) == sorted(GPU_NODES + ["lb-1", "mon-1"]), up
    assert all(r["value"][1] == "1" for r in up.values()), up
    assert up["gpu-a2"]["metric"]["rack"] == "rack_a" and up["gpu-b3"]["metric"]["rack"] == "rack_b", up
    # The RoCE NICs' ECN/CNP counters (rdma-counters-textfile on every GPU node), as the lab's hw_counters replay
    # them: mlx5_0 the recorded congested mlx5_bond_0, mlx5_1 the recorded mlx5_1 (tests/fixtures/SOURCES.md).
    ports = prometheus("rdma_hw_counters_up")
    assert sorted((r["metric"]["node"], r["metric"]["device"], r["value"][1]) for r in ports) == \
        sorted((n, d, "1") for n in GPU_NODES for d in ("mlx5_0", "mlx5_1")), ports
    ecn = {(r["metric"]["node"], r["metric"]["device"], r["metric"]["counter"]): r["value"][1] for r in
           prometheus('rdma_hw_counter_total{counter=~"np_ecn_marked_roce_packets|np_cnp_sent|rp_cnp_handled"}')}
    assert ecn[("gpu-b2", "mlx5_0", "np_ecn_marked_roce_packets")] == "21278189006", ecn
    assert ecn[("gpu-a1", "mlx5_0", "np_cnp_sent")] == "1052612505", ecn
    assert ecn[("gpu-a3", "mlx5_1", "rp_cnp_handled")] == "12" and len(ecn) == 3 * 2 * len(GPU_NODES), ecn
    failing = 'gpu_health_check_status{check="ecc",severity="fail"} == 1'
    # Earlier tests inject ECC faults too, and a health timer tick may have caught one: refresh every node's
    # textfile now that no fault is set, and wait for the scrape.
    run(str(BIN / "ansible"), "gpu_nodes", *VAULT, "-m", "ansible.builtin.systemd_service",
        "-a", "name=gpu-health-textfile.service state=started")
    assert wait_for(failing, lambda r: r == []) == [], "no ECC failure before the fault"
    set_faults("gpu-b1", {"ecc_uncorrectable": [{"gpu": 1, "count": 4}]})
    try:
        # Run the health timer's service now instead of waiting for its next tick.
        run(str(BIN / "ansible"), "gpu-b1", *VAULT, "-m", "ansible.builtin.systemd_service",
            "-a", "name=gpu-health-textfile.service state=started")
        result = wait_for(failing, lambda r: len(r) > 0)
        assert [(r["metric"]["node"], r["metric"]["gpu"], r["metric"]["rack"]) for r in result] == \
            [("gpu-b1", "1", "rack_b")], result
    finally:
        set_faults("gpu-b1", {})
        run(str(BIN / "ansible"), "gpu-b1", *VAULT, "-m", "ansible.builtin.systemd_service",
            "-a", "name=gpu-health-textfile.service state=started")
    assert wait_for(failing, lambda r: r == []) == []


# vLLM's e2e latency histogram boundaries (lab/engine/lab_engine.py E2E_BUCKETS)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)
LAB_GPUS = {"gpu-a1": 8, "gpu-a2": 8, "gpu-a3": 8, "gpu-b1": 8, "gpu-b2": 8, "gpu-b3": 4}  # the profiles' gpu_count


def test_engine_metrics_give_the_kpis_of_real_load_through_the_lb(lab):
    """Prometheus scrapes every lab engine (vLLM's series names, labelled engine and model). After a bounded load
    through nginx, against the load generator's own count: the scraped token counters grew by exactly the tokens
    it received; tokens/s x 300 s is within 15 % of the tokens of the 5-minute window (rate()'s extrapolation
    across 5 s scrapes and 15 s rule evaluations); tokens/s per GPU and $/M tokens are those rates over the
    profiles' GPU counts and the GPU-hour price; the P99 latency lies in the load generator's own P99 bucket of
    vLLM's histogram or the one below (the engine does not see nginx's and TLS's share of the time)."""
    up = prometheus('up{job="inference"}')
    assert sorted(r["metric"]["node"] for r in up) == GPU_NODES, up
    assert {(r["metric"]["engine"], r["metric"]["model"], r["value"][1]) for r in up} == {("lab", "lab-tiny", "1")}, up
    total = 'sum(vllm:generation_tokens_total{job="inference"})'
    start = time.time()
    before = float(prometheus(total)[0]["value"][1])
    older = prometheus(total, at=start - 300)
    window_before = before - float(older[0]["value"][1]) if older else before
    assert window_before >= 0, "an engine restarted within the last 5 minutes: its counter reset"
    out = subprocess.run(["docker", "exec", "gpulab-lb-1", "python3", "/opt/loadgen.py", "--url",
                          "https://%s/v1/completions" % LB, "--cacert", "/etc/nginx/tls/lab-ca.crt", "--model",
                          "lab-tiny", "--max-requests", "300", "--max-seconds", "60", "--threads", "3",
                          "--interval", "0.05", "--out", "/tmp/kpi-load.json"],
                         capture_output=True, text=True, check=True).stdout
    load = json.loads(out.strip().splitlines()[-1])
    assert (load["ok"], load["failed"], load["tokens"]) == (300, 0, 1200), load
    after = wait_for(total, lambda r: bool(r) and float(r[0]["value"][1]) >= before + load["tokens"], timeout=60)
    assert float(after[0]["value"][1]) - before == load["tokens"], (before, after, load)
    window = window_before + load["tokens"]
    rate = wait_for("cluster:inference_tokens_per_second:rate5m",
                    lambda r: bool(r) and float(r[0]["value"][1]) * 300 >= 0.85 * window, timeout=60)
    assert rate, "cluster:inference_tokens_per_second:rate5m has no value"
    tokens_per_s = float(rate[0]["value"][1])
    assert 0.85 * window <= tokens_per_s * 300 <= 1.15 * window, (tokens_per_s * 300, window, load)
    # GPUs per node from the gpu_health textfile (the lab runs no dcgm-exporter): the profiles' counts
    gpus = {r["metric"]["node"]: float(r["value"][1]) for r in prometheus("node:gpus:count")}
    assert gpus == LAB_GPUS, gpus
    # per GPU: every node's share, times its GPUs, adds up to the cluster's tokens/s (one rule evaluation)
    per_gpu = prometheus("sum(node:inference_tokens_per_second_per_gpu:rate5m * on (node) node:gpus:count)"
                         " / on () cluster:inference_tokens_per_second:rate5m")
    assert per_gpu and float(per_gpu[0]["value"][1]) == pytest.approx(1.0, rel=1e-9), per_gpu
    assert len(prometheus("node:inference_tokens_per_second_per_gpu:rate5m > 0")) >= 2  # least_conn spread
    price = yaml.safe_load((ROOT / "roles" / "prometheus" / "defaults" / "main.yml").read_text())[
        "prometheus_kpi_gpu_hour_usd"]
    # $/M tokens x tokens/s = GPUs x price per GPU-second x 1e6
    cost = prometheus("cluster:inference_cost_usd_per_million_tokens:rate5m"
                      " * on () cluster:inference_tokens_per_second:rate5m")
    assert cost and float(cost[0]["value"][1]) == pytest.approx(sum(LAB_GPUS.values()) * price / 3600 * 1e6,
                                                                rel=1e-9), cost
    p99 = float(prometheus("cluster:inference_request_latency_seconds:p99_5m")[0]["value"][1])

    def bucket(seconds):
        return next((i for i, bound in enumerate(E2E_BUCKETS) if seconds <= bound), len(E2E_BUCKETS))
    assert bucket(p99) <= bucket(load["latency_p99_seconds"]) <= bucket(p99) + 1, (p99, load)


def set_lab_bmc(host, **readings):
    """Change what a lab BMC reports (its state file) and restart it, as a test of the real thing would."""
    script = ("import json, os, sys; p = '/var/lib/labbmc/state.json'; "
              "s = json.load(open(p)) if os.path.exists(p) else {}; s.update(json.loads(sys.argv[1])); "
              "json.dump(s, open(p, 'w'))")
    subprocess.run(["docker", "exec", "gpulab-" + host, "python3", "-c", script, json.dumps(readings)], check=True)
    subprocess.run(["docker", "exec", "gpulab-" + host, "systemctl", "restart", "lab-bmc.service"], check=True)


def test_a_leak_and_a_hot_coolant_inlet_alert_for_exactly_their_nodes(lab, eda):
    """The BMC exporter on mon-1 reads every lab BMC; gpu-b2's BMC reports a leak and gpu-a1's a 52 C coolant
    inlet: CoolantLeak fires for gpu-b2 only and reaches Alertmanager's page and eda receivers, CoolantInletHigh
    for gpu-a1 only. The rulebook quarantines gpu-b2 and keeps it out while the leak fires (its GPUs check
    healthy); when the BMCs read normal again both alerts clear and the rulebook returns gpu-b2 to service."""
    up = wait_for('bmc_up == 1', lambda r: len(r) == len(GPU_NODES))
    assert sorted(r["metric"]["node"] for r in up) == GPU_NODES, up
    assert wait_for('ALERTS{alertname=~"CoolantLeak|CoolantInletHigh"}', lambda r: r == []) == []
    runs_before = len(remediation_log())
    set_lab_bmc("gpu-b2", leak_detected=True)
    set_lab_bmc("gpu-a1", coolant_inlet_c=52.0)
    try:
        firing = 'ALERTS{alertname="%s",alertstate="firing"}'
        leak = wait_for(firing % "CoolantLeak", lambda r: len(r) > 0, timeout=90)
        assert [(r["metric"]["node"], r["metric"]["severity"]) for r in leak] == [("gpu-b2", "page")], leak
        hot = wait_for(firing % "CoolantInletHigh", lambda r: len(r) > 0, timeout=120)
        assert [r["metric"]["node"] for r in hot] == ["gpu-a1"], hot
        assert prometheus('bmc_leak_detector_leaking{node="gpu-b2"}'), "the leaking detector is named"
        url = "http://198.18.0.41:9093/api/v2/alerts?" + urllib.parse.urlencode({"filter": 'alertname="CoolantLeak"'})
        alerts = poll(lambda: json.load(urllib.request.urlopen(url, timeout=10)), lambda r: r != [], 60)
        assert [(a["labels"]["node"], sorted(r["name"] for r in a["receivers"])) for a in alerts] == \
            [("gpu-b2", ["eda", "page"])], alerts
        runs = poll(lambda: remediation_log()[runs_before:], lambda r: r != [], 180)
        assert [(r["node"], r["alert"]["name"], r["alert"]["status"], r["final"]["ready"]) for r in runs] == \
            [("gpu-b2", "CoolantLeak", "firing", False)], runs
        assert any(reason.startswith("CoolantLeak firing since") for reason in runs[0]["final"]["reasons"]), runs
        assert lb_backends()["gpu-b2"] == "down"
    finally:
        set_lab_bmc("gpu-b2", leak_detected=False)
        set_lab_bmc("gpu-a1", coolant_inlet_c=32.0)
    assert wait_for('ALERTS{alertname=~"CoolantLeak|CoolantInletHigh",alertstate="firing"}',
                    lambda r: r == [], timeout=90) == []
    # The resolved notification: the rulebook runs remediate.yml again, the checks pass, gpu-b2 serves.
    runs = poll(lambda: remediation_log()[runs_before:], lambda r: len(r) >= 2, 180)
    assert [(r["node"], r["alert"]["status"], r["final"]["ready"]) for r in runs] == \
        [("gpu-b2", "firing", False), ("gpu-b2", "resolved", True)], runs
    assert all(state == "serving" for state in lb_backends().values()), lb_backends()
    assert poll(lambda: alerts_firing("NodeRemediationFailed"), lambda r: r == [], 90) == []


def rail_netdev(host, subnet):
    """The netdev holding the node's address in a rail subnet (docker names rails eth1/eth2 in any order)."""
    out = subprocess.run(["docker", "exec", "gpulab-" + host, "ip", "-o", "-4", "addr", "show", "to", subnet],
                         capture_output=True, text=True, check=True).stdout
    return out.split()[1]


def host_veth(host, netdev):
    """The host end of a node's veth: the switch port its rail plugs into."""
    peer = subprocess.run(["docker", "exec", "gpulab-" + host, "cat", "/sys/class/net/%s/iflink" % netdev],
                          capture_output=True, text=True, check=True).stdout.strip()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    for line in links.splitlines():
        index, name = line.split(": ")[:2]
        if index == peer:
            return name.split("@")[0]
    raise AssertionError("no host interface with index %s for %s %s" % (peer, host, netdev))


def test_a_wrong_mtu_on_a_node_or_on_the_network_is_named(lab):
    # gpu-a2's own rail0 interface at 1500, and gpu-b1's rail1 switch port (the host end of its veth) at
    # 1500: the node still says 9000 there, only the jumbo pings can tell.
    a2_dev = rail_netdev("gpu-a2", "198.18.1.0/24")
    b1_port = host_veth("gpu-b1", rail_netdev("gpu-b1", "198.18.2.0/24"))
    broken = [["docker", "exec", "gpulab-gpu-a2", "ip", "link", "set", "dev", a2_dev, "mtu", "%d"],
              ["ip", "link", "set", "dev", b1_port, "mtu", "%d"]]
    for cmd in broken:
        subprocess.run([c.replace("%d", "1500") for c in cmd], check=True)
    try:
        rc, out = playbook("playbooks/verify.yml", check=False)
        assert rc != 0, "verify.yml must fail when the fabric is wrong"
        rows = report()
        a2, b1 = rows["gpu-a2"]["columns"]["fabric"], rows["gpu-b1"]["columns"]["fabric"]
        assert a2["status"] == "fail" and b1["status"] == "fail", (a2, b1)
        assert "rail0 gpu-a2 %s (198.18.1.12): MTU 1500, the rail is 9000" % a2_dev in a2["reasons"], a2
        assert b1["reasons"][0] == "rail1: every full-size ping to and from all 5 peers failed", b1
        # The others reach everyone else: their failing pairs are only with the two at fault, so they warn.
        for node in ("gpu-a1", "gpu-a3", "gpu-b2", "gpu-b3"):
            fabric = rows[node]["columns"]["fabric"]
            assert fabric["status"] == "warn" and rows[node]["ready"], (node, fabric)
            assert any("-> gpu-a2" in r and "gpu-a2 is at fault on rail0" in r for r in fabric["reasons"]), fabric
            assert any("-> gpu-b1" in r and "gpu-b1 is at fault on rail1" in r for r in fabric["reasons"]), fabric
        details = json.loads((ROOT / "reports" / "gpu-a1.json").read_text())["fabric"]
        assert details["pairs_checked"] == 10 and details["pairs_ok"] == 8, details
        assert "4 of 6 nodes ready" in out
    finally:
        for cmd in broken:
            subprocess.run([c.replace("%d", "9000") for c in cmd], check=True)
    playbook("playbooks/verify.yml")
    assert all(r["columns"]["fabric"]["status"] == "ok" for r in report().values())


def test_a_node_stopped_mid_run_is_named_and_the_rest_converge(lab):
    # Stop gpu-b2 once the run reaches the RDMA play. Only the plays from there to verify run: the node baseline
    # before it and monitoring and inference after it, converged already on every node, would only be re-checked.
    proc = subprocess.Popen([str(BIN / "ansible-playbook"), *VAULT, "playbooks/site.yml",
                             "--tags", "rdma,power,verify"], cwd=ROOT,
                            env=ansible_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, stopped = [], False
    try:
        for line in proc.stdout:
            lines.append(line)
            if not stopped and line.startswith("PLAY [Configure RDMA over Converged Ethernet]"):
                subprocess.run(["docker", "stop", "-t", "5", "gpulab-gpu-b2"], check=True, capture_output=True)
                stopped = True
        rc = proc.wait(timeout=1800)
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["docker", "start", "gpulab-gpu-b2"], check=True, capture_output=True)
    out = "".join(lines)
    assert stopped, out[-3000:]
    assert rc != 0, out[-3000:]
    hosts = recap(out)
    assert hosts["gpu-b2"]["unreachable"] + hosts["gpu-b2"]["failed"] > 0, hosts
    for node in GPU_NODES:
        if node != "gpu-b2":
            assert hosts[node]["failed"] == 0 and hosts[node]["unreachable"] == 0, (node, hosts)
    # The rest went on to the end: verify ran on them.
    assert set(report()) >= set(GPU_NODES) - {"gpu-b2"}
    summary = out.split("FAILED HOSTS")[1]
    assert re.search(r"^gpu-b2: (unreachable|failed) in play '[^']+', task '[^']+'", summary, re.M), summary
    assert not re.search(r"^gpu-(a1|a2|a3|b1|b3):", summary, re.M), summary
    # Back up, the run an operator makes next (site.yml limited to the failed node) converges it, and every
    # node is ready again. The others finished the failed run: a whole-site run would only re-check them.
    playbook("playbooks/lab/up.yml")
    rc, out = playbook("playbooks/site.yml", "-l", "gpu-b2")
    hosts = recap(out)
    assert hosts["gpu-b2"]["failed"] == 0 and hosts["gpu-b2"]["unreachable"] == 0, hosts
    rc, out = playbook("playbooks/verify.yml")
    assert "6 of 6 nodes ready" in out


def test_acceptance_gates_name_low_bandwidth_and_a_failed_diag(lab):
    """nccl_busbw_low halves gpu-a2's replayed all-reduce and dcgm_diag_fail fails Inforom on gpu-b1's GPU 4:
    each node is not ready in exactly its gate's column, with measured against required (aznhc marks in
    playbooks/vars/hardware_profiles.yml); gpu-b3 without DCGM (its repository lacks a package) is not ready in
    the DCGM column, and gpu-a3 whose host engine stopped is not ready there with dcgmi's own reason until the
    dcgm role brings nvidia-dcgm back and waits for it to answer. Then the opt-in multi-node run renders mpirun
    over rail0 per profile."""
    def failing(row):
        return {c for c, v in row["columns"].items() if v["status"] in ("fail", "error")}

    set_faults("gpu-a2", {"nccl_busbw_low": {"factor": 0.5}})
    set_faults("gpu-b1", {"dcgm_diag_fail": [{"test": "Inforom", "gpu": 4}]})
    try:
        # gpu-b3 as a node that never had DCGM, served a repository that lacks one DCGM package: the dcgm role
        # fails naming the package, and verify's DCGM gate names the missing tool (the simulator has no dcgmi).
        dcgm = ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12"]
        subprocess.run(["docker", "exec", "gpulab-gpu-b3", "sh", "-c", "apt-mark unhold %s >/dev/null && "
                        "apt-get purge -y -q %s >/dev/null" % (" ".join(dcgm), " ".join(dcgm))], check=True)
        rc, out = playbook("playbooks/node_baseline.yml", "-l", "gpu-b3", "--tags", "dcgm", "-e", json.dumps(
            {"nvidia_driver_repo": {"url": "http://127.0.0.1:8765/debian12-without-dcgm/",
                                    "key_url": "http://127.0.0.1:8765/key.asc"}}), check=False)
        assert rc != 0 and recap(out)["gpu-b3"]["failed"] == 1, out[-3000:]
        failure = out[out.index("fatal: [gpu-b3]"):out.index("PLAY RECAP")]
        assert "datacenter-gpu-manager-4-core" in failure, failure
        subprocess.run(["docker", "exec", "gpulab-gpu-a3", "systemctl", "stop", "nvidia-dcgm"], check=True)
        rc, out = playbook("playbooks/verify.yml", check=False)
        assert rc != 0, "verify.yml must fail when nodes are not ready"
        hosts = recap(out)
        assert all(hosts[n]["failed"] == 0 for n in GPU_NODES), hosts  # the gates never fail a node's play
        rows = report()
        a2, b1 = rows["gpu-a2"], rows["gpu-b1"]
        assert failing(a2) == {"nccl"}, a2["reasons"]
        assert a2["columns"]["nccl"]["reasons"][0].startswith(
            "single-node: bus bandwidth at the largest size (17179869184 B) 342.63 GB/s is below the required "
            "460.00 GB/s"), a2["columns"]["nccl"]
        gate = a2["gates"]["nccl"]
        assert (gate["measured_busbw_gbps"], gate["required_busbw_gbps"]) == (342.63, 460.0), gate
        assert failing(b1) == {"dcgm"}, b1["reasons"]
        assert b1["columns"]["dcgm"]["reasons"] == ["level 1 Inforom fail (inforom_corrupt, GPU 4)"]
        b3 = rows["gpu-b3"]
        assert failing(b3) == {"dcgm"}, b3["reasons"]
        assert b3["columns"]["dcgm"]["reasons"] == [
            "dcgmi is not on PATH; install NVIDIA DCGM (datacenter-gpu-manager) or give path"], b3["columns"]["dcgm"]
        a3 = rows["gpu-a3"]
        assert failing(a3) == {"dcgm"}, a3["reasons"]
        assert "Host engine connection invalid/disconnected" in " ".join(a3["columns"]["dcgm"]["reasons"]), a3
        assert all(rows[n]["ready"] for n in GPU_NODES if n not in ("gpu-a2", "gpu-a3", "gpu-b1", "gpu-b3")), \
            {n: rows[n]["reasons"] for n in GPU_NODES}
        # the gates ran the tools the product roles installed: nccl-tests built from source, DCGM's dcgmi
        assert rows["gpu-a1"]["gates"]["nccl"]["cmd"][0] == "/opt/nccl-tests/bin/all_reduce_perf"
        assert rows["gpu-b1"]["gates"]["dcgm"]["cmd"][:3] == ["/usr/bin/dcgmi", "diag", "-r"]
        # healthy nodes: each profile's replay against its mark
        assert (rows["gpu-a1"]["gates"]["nccl"]["measured_busbw_gbps"],
                rows["gpu-a1"]["gates"]["nccl"]["required_busbw_gbps"]) == (685.27, 460.0)
        assert (rows["gpu-b2"]["gates"]["nccl"]["measured_busbw_gbps"],
                rows["gpu-b2"]["gates"]["nccl"]["required_busbw_gbps"]) == (386.56, 228.0)
        assert rows["gpu-b3"]["gates"]["nccl"]["required_busbw_gbps"] is None  # no published L40S mark
        md = (ROOT / "reports" / "readiness.md").read_text()
        assert "| gpu-a2 | NCCL all-reduce single-node (largest) | 342.63 GB/s | 460.00 GB/s | fail |" in md
        assert "| gpu-b1 | DCGM diag level 1 | 8 pass, 1 fail, 0 warn, 0 skip | no test in Fail | fail |" in md
        assert "gpu-a2: nccl: single-node: bus bandwidth" in out and "gpu-b1: dcgm: level 1 Inforom fail" in out
    finally:
        set_faults("gpu-a2", {})
        set_faults("gpu-b1", {})
        rc, out = playbook("playbooks/node_baseline.yml", "-l", "gpu-b3,gpu-a3", "--tags", "dcgm")
    assert recap(out)["gpu-a3"]["changed"] >= 1, out[-2000:]  # nvidia-dcgm started again
    rc, out = playbook("playbooks/verify.yml", "-e", "node_verify_nccl_multi_node=true")
    rows = report()
    assert all(rows[n]["ready"] for n in GPU_NODES), {n: rows[n]["reasons"] for n in GPU_NODES}
    for nodes, np_, addresses, required in (
            (["gpu-a1", "gpu-a2", "gpu-a3"], "24", "198.18.1.11:8,198.18.1.12:8,198.18.1.13:8", 48.0),
            (["gpu-b1", "gpu-b2"], "16", "198.18.1.14:8,198.18.1.15:8", 18.0)):
        for node in nodes:
            gate = rows[node]["gates"]["nccl_multi_node"]
            assert gate["status"] == "ok" and gate["hosts"] == nodes, (node, gate)
            assert (gate["measured_busbw_gbps"], gate["required_busbw_gbps"]) == (386.56, required), gate
            assert gate["cmd"][:6] == ["mpirun", "--allow-run-as-root", "-np", np_, "-H", addresses], gate["cmd"]
            assert gate["cmd"][8:12] == ["--mca", "oob_tcp_if_include", "198.18.1.0/24", "--mca"], gate["cmd"]
    b3 = rows["gpu-b3"]["gates"]["nccl_multi_node"]
    assert b3["status"] == "skip" and "only node of profile pcie-l40s-4gpu" in b3["reasons"][0], b3


def comparable(row):
    """A readiness row without what a slice cannot share with a whole run (the fabric peers it pinged)."""
    return {"ready": row["ready"], "node": row["node"], "rack": row["rack"],
            "columns": {c: v for c, v in row["columns"].items() if c != "fabric"},
            "fabric": row["columns"]["fabric"]["status"]}


def test_verify_as_four_job_slices_merged_matches_one_run(lab, tmp_path):
    """AWX job slicing splits the inventory's hosts round robin over the slices; each slice is its own job
    (ansible-runner, as AWX runs it) publishing its own report to a share and handing its run group on with
    set_stats. merge_readiness.yml joins the four into the report of one unsliced run, faults included."""
    set_faults("gpu-a2", {"nvlink_inactive": [{"gpu": 2, "links": [5]}]})
    set_faults("gpu-b1", {"ecc_uncorrectable": [{"gpu": 1, "count": 4}]})
    share = tmp_path / "share"
    try:
        status, rc, events, out = ansible_runner(tmp_path, "playbooks/verify.yml", "verify-whole",
                                                 "-e", "readiness_report_dir=%s" % (tmp_path / "whole"))
        assert status == "failed" and rc != 0, out[-2000:]  # two nodes are not ready
        failed = {e["event_data"]["host"] for e in events if e["event"] == "runner_on_failed"}
        assert failed == {"localhost"}, failed  # only the report's gate fails; no node's play does
        whole = json.loads((tmp_path / "whole" / "readiness.json").read_text())
        assert whole["not_ready"] == ["gpu-a2", "gpu-b1"], whole["not_ready"]
        for i in range(4):
            hosts = GPU_NODES[i::4]
            status, rc, events, out = ansible_runner(
                tmp_path, "playbooks/verify.yml", "slice%d" % i, "-l", ",".join(hosts + ["localhost"]),
                "-e", "readiness_report_dir=%s" % (tmp_path / ("slice%d" % i)),
                "-e", "readiness_report_publish_dir=%s" % share,
                "-e", "readiness_report_run_group=wf-7", "-e", "readiness_report_run_id=slice%d" % i)
            stats = [e["event_data"].get("artifact_data") for e in events if e["event"] == "playbook_on_stats"]
            assert stats and stats[0]["readiness_run_group"] == "wf-7", out[-2000:]
            rows = json.loads((share / "gpulab" / "wf-7" / ("slice%d" % i) / "readiness.json").read_text())["nodes"]
            assert sorted(r["node"] for r in rows) == sorted(hosts), rows
        # AWX hands the slices' artifacts to the merge node as extra vars; their limit was the whole cluster.
        status, rc, events, out = ansible_runner(
            tmp_path, "playbooks/merge_readiness.yml", "merge", "-e", "readiness_report_publish_dir=%s" % share,
            "-e", "readiness_run_group=wf-7", "-e", "readiness_run_limit=all",
            "-e", "readiness_report_dir=%s" % (tmp_path / "merged"))
        assert status == "failed" and rc != 0, out[-2000:]  # the merged report's gate: two nodes not ready
        merged = json.loads((share / "gpulab" / "wf-7" / "merged" / "readiness.json").read_text())
        assert merged["not_ready"] == whole["not_ready"], merged["not_ready"]
        assert [comparable(r) for r in merged["nodes"]] == [comparable(r) for r in whole["nodes"]]
        assert (tmp_path / "merged" / "readiness.json").read_text() == \
            (share / "gpulab" / "wf-7" / "merged" / "readiness.json").read_text()
        assert sorted(p.stem for p in (share / "gpulab" / "wf-7" / "merged").glob("gpu-*.json")) == GPU_NODES
    finally:
        set_faults("gpu-a2", {})
        set_faults("gpu-b1", {})


# What the rulebook acts on: roles/eda_rulebook's alerts, read from the role rather than copied.
EDA_ALERTS = 'ALERTS{alertname=~"%s",alertstate="firing"}' % "|".join(yaml.safe_load(
    (ROOT / "roles" / "eda_rulebook" / "defaults" / "main.yml").read_text())["eda_rulebook_alerts"])


@pytest.fixture
def eda(lab):
    """The rulebook service (scripts/eda.sh, as make lab starts it), for the tests that watch it act. Left running
    through the others it remediated every fault they injected, under them: runs that took the controller's
    cores from the test and drained nodes it was checking. It starts with none of its alerts firing, so no
    earlier test's alert reaches it, and stops after the test once the runs it started have ended."""
    assert wait_for(EDA_ALERTS, lambda r: r == [], timeout=180) == [], "alerts the rulebook acts on still fire"
    run("scripts/eda.sh", "start")
    yield
    run("scripts/eda.sh", "stop", check=False)
    poll(lambda: subprocess.run(["pgrep", "-f", "remediate.yml"], capture_output=True).returncode,
         lambda rc: rc != 0, 600)


def remediation_log():
    path = ROOT / "reports" / "remediation.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def alerts_firing(name):
    """The nodes an alert fires for."""
    return sorted({r["metric"]["node"] for r in prometheus('ALERTS{alertname="%s",alertstate="firing"}' % name)})


def poll(what, want, timeout):
    """Call what() every 2 s until want(result) or the timeout; return the last result."""
    deadline = time.monotonic() + timeout
    while True:
        result = what()
        if want(result) or time.monotonic() > deadline:
            return result
        time.sleep(2)


def test_a_gpu_fault_is_remediated_by_the_rulebook_with_no_person_in_the_loop(lab, eda, tmp_path):
    """An Xid on gpu-b2, and nobody acts: gpu-b2's health textfile shows it, GPUXidErrors and GPUHealthCheckFailed
    fire, Alertmanager's eda receiver posts them to the lab's ansible-rulebook (scripts/eda.sh, started with the
    lab), which runs remediate.yml for gpu-b2 once (the alerts arrive several times within the cooldown):
    quarantined on the LB, its bundle on the controller, still failing after the restarts, so it stays out and
    NodeRemediationFailed says so. The fault is cleared: the alerts resolve, the rulebook runs it again, gpu-b2
    checks healthy and serves again. Meanwhile the load generator through nginx sees no failed request, and no
    other node is quarantined, bundled or logged. Then remediate.yml by hand leaves the healthy cluster unchanged."""
    assert run("scripts/eda.sh", "status", check=False)[0] == 0, "the rulebook service is not running"
    diagnostics = ROOT / "reports" / "diagnostics"
    bundles_before = set(diagnostics.glob("*.tar.gz")) if diagnostics.exists() else set()
    runs_before = len(remediation_log())
    assert alerts_firing("NodeRemediationFailed") == []
    stop = "/tmp/eda-load.stop"
    subprocess.run(["docker", "exec", "gpulab-lb-1", "rm", "-f", stop], check=True)
    load = subprocess.Popen(["docker", "exec", "gpulab-lb-1", "python3", "/opt/loadgen.py", "--url",
                             "https://%s/v1/completions" % LB, "--cacert", "/etc/nginx/tls/lab-ca.crt", "--model",
                             "lab-tiny", "--max-requests", "2000", "--max-seconds", "420", "--threads", "2",
                             "--interval", "0.25", "--stop-file", stop, "--out", "/tmp/eda-load.json"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    others = [n for n in GPU_NODES if n != "gpu-b2"]
    seen = []  # every LB state observed while waiting

    def backends():
        seen.append(lb_backends())
        return seen[-1]
    try:
        set_faults("gpu-b2", {"xid": [{"gpu": 4, "code": 79}]})
        try:
            # the health timer's next tick, now
            run(str(BIN / "ansible"), "gpu-b2", *VAULT, "-m", "ansible.builtin.systemd_service",
                "-a", "name=gpu-health-textfile.service state=started")
            assert poll(lambda: alerts_firing("GPUXidErrors"), lambda r: r != [], 90) == ["gpu-b2"]
            assert poll(backends, lambda r: r.get("gpu-b2") == "down", 120)["gpu-b2"] == "down", seen[-1]
            failed = poll(lambda: alerts_firing("NodeRemediationFailed"), lambda r: r != [], 180)
            assert failed == ["gpu-b2"], failed
            runs = remediation_log()[runs_before:]
            assert [(r["node"], r["alert"]["status"], r["final"]["ready"]) for r in runs][:1] == \
                [("gpu-b2", "firing", False)], runs
            # a flapped check's re-check, if any, found the node failing too
            assert all((r["alert"]["status"], r["first"]["ready"], r["final"]["ready"]) == ("resolved", False, False)
                       for r in runs[1:]), runs
            assert runs[0]["alert"]["name"] in ("GPUXidErrors", "GPUHealthCheckFailed")
            assert any("GPU4 xid" in reason for reason in runs[0]["final"]["reasons"]), runs[0]
            # one bundle per run that found the node failing, all of them gpu-b2's
            bundles = {b.resolve() for b in set(diagnostics.glob("*.tar.gz")) - bundles_before}
            assert sorted(b.name.rsplit("-", 1)[0] for b in bundles) == ["gpu-b2"] * len(runs), bundles
            assert Path(runs[0]["bundle"]).resolve() in bundles, runs[0]
            with tarfile.open(runs[0]["bundle"]) as tar:
                manifest = json.load(tar.extractfile("manifest.json"))
                smi = tar.extractfile("nvidia-smi-q.txt").read().decode()
                verify = json.load(tar.extractfile("node_verify.json"))
                dmesg = tar.extractfile("dmesg.txt").read().decode()
                trigger = json.load(tar.extractfile("remediate_alert.json"))
            assert manifest["node"] == "gpu-b2" and trigger == runs[0]["alert"]
            files = {f["file"]: f for f in manifest["files"]}
            assert files["nvidia-smi-q.txt"]["rc"] == 0 and "Attached GPUs                             : 8" in smi
            assert files["nvidia-bug-report.log.gz"]["error"] == "nvidia-bug-report.sh not found"
            assert "NVRM: Xid" in dmesg and ": 79," in dmesg
            assert any("GPU4 xid" in r for r in verify["row"]["reasons"]), verify["row"]
            # The next site run keeps the quarantined node out although its engine answers.
            playbook("playbooks/inference.yml", "-l", "lb")
            assert backends()["gpu-b2"] == "down"
        finally:
            set_faults("gpu-b2", {})
        run(str(BIN / "ansible"), "gpu-b2", *VAULT, "-m", "ansible.builtin.systemd_service",
            "-a", "name=gpu-health-textfile.service state=started")
        assert poll(backends, lambda r: r.get("gpu-b2") == "serving", 180)["gpu-b2"] == "serving", seen[-1]
        assert poll(lambda: alerts_firing("NodeRemediationFailed"), lambda r: r == [], 90) == []
    finally:
        subprocess.run(["docker", "exec", "gpulab-lb-1", "touch", stop], check=True)
        out = load.communicate(timeout=120)[0]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["failed"] == 0 and summary["ok"] > 100, summary
    assert all(state[n] == "serving" for state in seen for n in others), seen
    runs = [(r["node"], r["alert"]["status"], r["first"]["ready"], r["final"]["ready"], r["quarantined_before"])
            for r in remediation_log()[runs_before:]]
    # One run for the firing alerts; the last resolution returned the node. A resolution between them (a check
    # that flapped while the Xid stayed: the health timer seeing Fabric Manager restart) may re-check the node,
    # and then it must have found it failing and kept it out.
    assert runs[0] == ("gpu-b2", "firing", False, False, False) and runs[-1] == ("gpu-b2", "resolved", True, True, True), runs
    assert all(run == ("gpu-b2", "resolved", False, False, True) for run in runs[1:-1]), runs
    assert sorted(b.name.rsplit("-", 1)[0] for b in set(diagnostics.glob("*.tar.gz")) - bundles_before) == \
        ["gpu-b2"] * sum(1 for run in runs if not run[2])  # a bundle from each run that found it failing
    # By hand, on the healthy cluster: every node checked, nothing changed, nothing logged.
    rc, out = playbook("playbooks/remediate.yml")
    hosts = recap(out)
    assert all(hosts[n]["changed"] == 0 and hosts[n]["failed"] == 0 for n in GPU_NODES), hosts
    assert all("%s: healthy" % n in out for n in GPU_NODES), out[-3000:]
    assert len(remediation_log()) == runs_before + len(runs)
    status, answer, tls = complete(lb_ca(tmp_path))
    assert status == 200, answer


# A new rack with one new node, added to the running lab from a second inventory source.
SCALE_OUT = """\
all:
  children:
    gpu_nodes:
      children:
        rack_c:
          vars: {rack_power_budget_watts: 6000}
          hosts:
            gpu-c1: {ansible_host: 198.18.0.24, node_index: 6, hardware_profile: pcie-l40s-4gpu}
"""


def test_scale_out_adds_a_node_without_touching_the_others(lab, tmp_path):
    # Two levels below the repository, like inventories/lab: the lab's group_vars find .lab/ from inventory_dir.
    inventory = ROOT / ".lab" / "scale_out" / "hosts.yml"
    inventory.parent.mkdir(parents=True, exist_ok=True)
    inventory.write_text(SCALE_OUT)
    both = ["-i", "inventories/lab", "-i", str(inventory)]
    ANSIBLE_HOSTS["gpu-c1"] = "198.18.0.24"
    try:
        # The new machine as it arrives: a container, its simulated GPUs, the repository mirror, its BMC.
        for play in ("up.yml", "simulator.yml", "apt_repo.yml", "bmc.yml", "models.yml"):
            playbook("playbooks/lab/" + play, *both, "-l", "gpu-c1,localhost")
        rc, out = playbook("playbooks/scale_out.yml", *both, "-e", "scale_out_hosts=gpu-c1")
        hosts = recap(out)
        assert hosts["gpu-c1"]["failed"] == 0 and hosts["gpu-c1"]["changed"] > 0, hosts
        # Healthy nodes: read by preflight (once, on the controller: they may have no line in the recap), and
        # wherever a play reached them, nothing changed.
        untouched = {"changed": 0, "failed": 0}
        assert all(hosts.get(n, untouched)["changed"] == 0 and hosts.get(n, untouched)["failed"] == 0
                   for n in GPU_NODES), hosts
        assert hosts["lb-1"]["changed"] > 0 and hosts["mon-1"]["changed"] > 0, hosts
        rows = report()
        assert list(rows) == ["gpu-c1"] and rows["gpu-c1"]["ready"], rows
        assert lb_backends() == {n: "serving" for n in GPU_NODES + ["gpu-c1"]}
        status, answer, tls = complete(lb_ca(tmp_path))
        assert status == 200, answer
        secrets = bmc_secrets()
        auth = "%s:%s" % (secrets["bmc_username"], secrets["bmc_password"])
        chassis = redfish("gpu-c1", "/redfish/v1/Chassis", auth)["Members"][0]["@odata.id"]
        assert redfish("gpu-c1", chassis + "/Controls/PowerLimit", auth)["SetPoint"] == 6000
        up = wait_for('up{job="node",node="gpu-c1"}', lambda r: len(r) == 1 and r[0]["value"][1] == "1")
        assert [(r["metric"]["rack"], r["value"][1]) for r in up] == [("rack_c", "1")], up
    finally:
        ANSIBLE_HOSTS.pop("gpu-c1")
        inventory.unlink()
        subprocess.run(["docker", "rm", "-f", "gpulab-gpu-c1"], capture_output=True)
        # Back to the lab's inventory: the load balancer and Prometheus forget the node again.
        playbook("playbooks/inference.yml", "-l", "lb", check=False)
        playbook("playbooks/monitoring.yml", "-l", "monitoring", check=False)
