"""tests/bench/bench_cluster.py's generated cluster: no address or node index taken by the lab, racks
within budget, the lab's group_vars applied, and the docker variant reaching each copy by container name."""
import ipaddress
import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))
import bench_cluster  # noqa: E402


def lab_hosts():
    out = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i", "inventories/lab",
                          "--list"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return json.loads(out)["_meta"]["hostvars"]


def generated(tmp_path, monkeypatch, size, connection="ssh"):
    monkeypatch.setattr(bench_cluster, "BENCH", tmp_path)
    (tmp_path / "group_vars").symlink_to(ROOT / "inventories" / "lab" / "group_vars")
    path = bench_cluster.inventory(size, connection)
    out = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(path), "--list"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return yaml.safe_load(path.read_text()), json.loads(out)


def test_bench_hosts_take_nothing_the_lab_uses(tmp_path, monkeypatch):
    _, inv = generated(tmp_path, monkeypatch, 16)
    bench, lab = inv["_meta"]["hostvars"], lab_hosts()
    assert len(bench) == 18 and not set(bench) & set(lab)
    addresses = [v["ansible_host"] for v in bench.values()]
    assert len(set(addresses)) == 18 and not set(addresses) & {v["ansible_host"] for v in lab.values()}
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network(bench["bench-n01"]["mgmt_subnet"]) for a in addresses)
    gpu = [v for v in bench.values() if "node_index" in v]
    assert sorted(v["node_index"] for v in gpu) == list(range(10, 26))
    assert not {v["node_index"] for v in gpu} & {v["node_index"] for v in lab.values() if "node_index" in v}


def test_bench_racks_hold_their_caps_and_get_the_lab_group_vars(tmp_path, monkeypatch):
    data, inv = generated(tmp_path, monkeypatch, 16)
    racks = data["all"]["children"]["gpu_nodes"]["children"]
    assert sorted(racks) == ["rack_bench1", "rack_bench2"]
    for rack in racks.values():
        assert rack["vars"]["rack_power_budget_watts"] == bench_cluster.NODE_CAP_WATTS * len(rack["hosts"]) == 81600
    n16 = inv["_meta"]["hostvars"]["bench-n16"]
    assert n16["bmc_power_port"] == 8443 and n16["lab_node_image"] == "gpulab-bench-gpu:latest"
    assert "ansible_connection" not in n16


def test_the_ssh_variant_goes_to_one_loopback_port_per_host(tmp_path, monkeypatch):
    _, inv = generated(tmp_path, monkeypatch, 16)
    hostvars = inv["_meta"]["hostvars"]
    ports = [v["ansible_port"] for v in hostvars.values()]
    assert len(set(ports)) == 18 and all(1024 < p < 32768 for p in ports)
    for v in hostvars.values():
        assert v["lab_ssh_published_port"] == v["ansible_port"]
        assert v["ansible_ssh_extra_args"] == "-o HostName=127.0.0.1"
    assert hostvars["bench-n16"]["ansible_port"] == 22116 and hostvars["bench-n16"]["ansible_host"] == "198.18.0.116"


def test_the_docker_variant_names_each_container(tmp_path, monkeypatch):
    _, inv = generated(tmp_path, monkeypatch, 4, "docker")
    hostvars = inv["_meta"]["hostvars"]
    assert sorted(hostvars) == ["bench-lb", "bench-mon", "bench-n01", "bench-n02", "bench-n03", "bench-n04"]
    for name, v in hostvars.items():
        assert v["ansible_connection"] == "community.docker.docker"
        assert v["ansible_docker_host"] == "gpulab-" + name and v["ansible_host"].startswith("198.18.0.")
        assert v["ansible_pipelining"] is True and "ansible_port" not in v


def test_recap_counts():
    """The bench's reading of a play recap: executed = ok + failed per host, node tasks = every result but
    changed, rescued and ignored (a bench run once died here unpacking the recap)."""
    out = ("gpu-a1                     : ok=12   changed=3    unreachable=0    failed=1    skipped=4    rescued=0    "
           "ignored=0\nlb-1                       : ok=5    changed=0    unreachable=1    failed=0    skipped=2    "
           "rescued=1    ignored=2\n")
    recap = {m.group(1): [int(g) for g in m.groups()[1:]] for m in bench_cluster.RECAP.finditer(out)}
    assert bench_cluster.executed(recap) == {"gpu-a1": 13, "lb-1": 5}
    assert bench_cluster.node_tasks(recap) == (12 + 0 + 1 + 4) + (5 + 1 + 0 + 2)
