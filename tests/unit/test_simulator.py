"""Tests of the lab nvidia-smi simulator (lab/simulator), run as a subprocess with its paths
pointed at a temporary state/fault directory."""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(REPO, "lab", "simulator", "nvidia_smi.py")
GEN = os.path.join(REPO, "lab", "simulator", "gen_infiniband.py")
DERIVE = os.path.join(REPO, "lab", "simulator", "derive.py")
FIX = os.path.join(REPO, "tests", "fixtures")
PROFILES = ["hgx-h100-8gpu", "hgx-a100-8gpu", "pcie-l40s-4gpu"]
COUNTS = {"hgx-h100-8gpu": 8, "hgx-a100-8gpu": 8, "pcie-l40s-4gpu": 4}


class Node:
    def __init__(self, tmp, profile):
        self.tmp, self.profile = tmp, profile
        self.env = dict(os.environ, GPUSIM_PROFILES=os.path.join(REPO, "lab", "simulator", "profiles"),
                        GPUSIM_FIXTURES=FIX, GPUSIM_PROFILE=profile,
                        GPUSIM_STATE=str(tmp / "state.json"), GPUSIM_FAULTS=str(tmp / "faults.json"))
        with open(os.path.join(REPO, "lab", "simulator", "profiles", profile + ".json")) as handle:
            self.files = json.load(handle)["files"]

    def run(self, *args, prog=SIM, rc=0):
        proc = subprocess.run([sys.executable, "-I", "-S", prog] + list(args), env=self.env,
                              capture_output=True, text=True, check=False)
        assert proc.returncode == rc, proc.stdout + proc.stderr
        return proc.stdout

    def dmesg(self, *args):
        link = self.tmp / "dmesg"
        if not link.exists():
            link.symlink_to(SIM)
        return self.run(*args, prog=str(link))

    def faults(self, data):
        (self.tmp / "faults.json").write_text(json.dumps(data))

    def fixture(self, key):
        with open(os.path.join(FIX, self.files[key]), newline="") as handle:
            return handle.read()

    def query(self, fields, fmt="csv,noheader,nounits"):
        out = self.run("--query-gpu=" + fields, "--format=" + fmt)
        return [line.split(", ") for line in out.strip().split("\n")]


@pytest.fixture(params=PROFILES)
def node(request, tmp_path):
    return Node(tmp_path, request.param)


@pytest.fixture
def h100(tmp_path):
    return Node(tmp_path, "hgx-h100-8gpu")


def test_derived_files_are_up_to_date(tmp_path):
    subprocess.run([sys.executable, DERIVE, "--fixtures", FIX, "--out", str(tmp_path)], check=True,
                   capture_output=True)
    for dirpath, _dirs, names in os.walk(tmp_path):
        for name in names:
            rel = os.path.relpath(os.path.join(dirpath, name), tmp_path)
            with open(os.path.join(dirpath, name)) as new, open(os.path.join(FIX, "derived", rel)) as old:
                assert new.read() == old.read(), rel


def test_h100_topo_keeps_the_pxb_nic_of_each_gpu():
    with open(os.path.join(FIX, "derived", "hgx-h100-8gpu", "topo.txt")) as handle:
        lines = handle.read().split("\n")
    for gpu in range(8):
        cells = lines[1 + gpu].split("\t")
        assert cells[9 + gpu] == "PXB" and cells[9:17].count("PXB") == 1
    assert "  NIC7: mlx5_7" in lines and "NIC8" not in "\n".join(lines)


def test_topo_replays_fixture(node):
    assert node.run("topo", "-m") == node.fixture("topo")


def test_retabbed_topo_expands_to_the_spaces_fixture():
    for profile, src in (("hgx-a100-8gpu", "topo_a100_8gpu_17nic_nv12_bond_spaces_xuesongtap.txt"),
                         ("pcie-l40s-4gpu", "topo_4xA10_sys_2nic_spaces_xuesongtap.txt")):
        with open(os.path.join(FIX, "derived", profile, "topo.txt")) as a, open(os.path.join(FIX, src)) as b:
            assert a.read().expandtabs(8) == b.read()


def test_q_and_table_replay_fixture(node):
    assert node.run("-q") == node.fixture("q")
    if node.profile != "hgx-a100-8gpu":  # derived A100 table shows persistence On; state says Off
        assert node.run() == node.fixture("table")
    assert node.run("--version") == node.fixture("version")


def test_list_and_count(node):
    lines = node.run("-L").strip().split("\n")
    assert len(lines) == COUNTS[node.profile]
    assert lines[0].startswith("GPU 0: NVIDIA ") and "(UUID: GPU-" in lines[0]


def test_query_gpu_subset_header_units_and_aliases(h100):
    out = h100.run("--query-gpu=gpu_name,power.limit,index", "--format=csv").split("\n")
    assert out[0] == "name, power.limit [W], index"
    assert out[1] == "NVIDIA H100 80GB HBM3, 700.00 W, 0"
    out = h100.run("--query-gpu=power.limit,memory.total", "--format=csv,nounits").split("\n")
    assert out[0] == "power.limit [W], memory.total [MiB]" and out[1] == "700.00, 81559"
    assert h100.query("index,pci.bus_id")[7] == ["7", "00000000:DB:00.0"]
    assert len(h100.run("-i", "2", "--query-gpu=index", "--format=csv,noheader").split()) == 1


def test_query_gpu_any_field_of_the_capture(node):
    header = node.fixture("query_gpu").split("\n")[0].split(", ")
    names = [h.split(" [")[0] for h in header]
    rows = node.query(",".join(names), "csv,noheader")
    assert len(rows) == COUNTS[node.profile] and all(len(r) == len(names) for r in rows)


def test_query_gpu_bad_field_and_format(h100):
    out = h100.run("--query-gpu=index,bogus", "--format=csv", rc=2)
    assert 'Field "bogus" is not a valid field to query.' in out
    h100.run("--query-gpu=index", "--format=json", rc=2)
    h100.run("--frobnicate", rc=2)


def test_profile_values(node):
    expected = {"hgx-h100-8gpu": ["NVIDIA H100 80GB HBM3", "200.00", "700.00", "700.00"],
                "hgx-a100-8gpu": ["NVIDIA A100-SXM4-80GB", "100.00", "500.00", "500.00"],
                "pcie-l40s-4gpu": ["NVIDIA L40S", "100.00", "350.00", "350.00"]}
    row = node.query("name,power.min_limit,power.max_limit,power.default_limit")[0]
    assert row == expected[node.profile]


def test_setters_change_state_and_are_reflected(node):
    lo = float(node.query("power.min_limit")[0][0])
    node.run("-i", "1", "-pm", "1")
    out = node.run("-i", "1", "-pm", "1")
    assert "already Enabled" in out
    node.run("-i", "1", "-pl", "%d" % (lo + 50))
    rows = node.query("index,persistence_mode,power.limit,enforced.power.limit")
    assert rows[1] == ["1", "Enabled", "%.2f" % (lo + 50), "%.2f" % (lo + 50)]
    q = node.run("-q", "-i", "1", "-d", "POWER")
    assert "Current Power Limit" in q and "%.2f W" % (lo + 50) in q
    assert "/  %dW |" % (lo + 50) in node.run()
    node.run("-pm", "0")
    assert {r[0] for r in node.query("persistence_mode")} == {"Disabled"}
    state = json.loads((node.tmp / "state.json").read_text())
    assert len(state["gpus"]) == COUNTS[node.profile]


def test_out_of_range_power_limit_fails(node):
    hi = float(node.query("power.max_limit")[0][0])
    out = node.run("-i", "0", "-pl", "%d" % (hi + 1), rc=2)
    assert "is not a valid power limit which should be between" in out
    assert node.query("power.limit")[0][0] == "%.2f" % hi


def test_application_clocks(h100):
    h100.run("-i", "3", "-ac", "2619,1500")
    assert h100.query("clocks.applications.memory,clocks.applications.graphics")[3] == ["2619", "1500"]
    assert "1500 MHz" in h100.run("-q", "-i", "3", "-d", "CLOCK")
    h100.run("-i", "3", "-ac", "1000,1500", rc=2)
    h100.run("-rac")
    assert h100.query("clocks.applications.graphics")[3] == ["1980"]


def test_init_state_only_when_absent(h100):
    assert "initialised" in h100.run("--gpusim-init-state")
    h100.run("-pm", "0")
    assert "already present" in h100.run("--gpusim-init-state")
    assert h100.query("persistence_mode")[0] == ["Disabled"]


def test_q_display_filter(h100):
    out = h100.run("-q", "-d", "PAGE_RETIREMENT,TEMPERATURE")
    assert out.count("    Retired Pages") == 8 and out.count("    Temperature") == 8
    assert "Product Name" not in out
    h100.run("-q", "-d", "NOPE", rc=2)


def test_nvlink_status_and_errors(node):
    status = node.run("nvlink", "-s")
    assert status == node.run("nvlink", "--status")
    if node.profile == "pcie-l40s-4gpu":
        assert status.count("Device does not have or support Nvlink") == 4
        return
    links = 18 if node.profile == "hgx-h100-8gpu" else 12
    assert status.count("Link %d:" % (links - 1)) == 8 and "Link %d:" % links not in status
    one = node.run("nvlink", "-s", "-i", "7")
    assert one.startswith("GPU 7: ") and one.count("GPU ") == 1
    errors = node.run("nvlink", "-e")
    assert errors.count("CRC Errors: 0") == 8 * links and "[...]" not in errors
    assert errors == node.run("nvlink", "--errorcounters")


def test_fault_gpu_missing(node):
    node.faults({"gpu_missing": [{"gpu": 1}]})
    n = COUNTS[node.profile] - 1
    assert len(node.run("-L").strip().split("\n")) == n
    assert len(node.query("index,uuid")) == n and node.query("count")[0] == [str(n)]
    topo = node.run("topo", "-m").split("\n")
    assert "GPU%d" % n not in topo[0] and sum(l.startswith("GPU") for l in topo) == n
    q = node.run("-q")
    assert q.count("\nGPU 0000") == n and "Attached GPUs                             : %d" % n in q \
        or ": %d\n" % n in q
    assert node.run("nvlink", "-s").count("GPU ") == n
    assert node.run().count("NVIDIA ") == n


def test_fault_nvlink_inactive(h100):
    h100.faults({"nvlink_inactive": [{"gpu": 6}, {"gpu": 2, "links": [3, 17]}]})
    out = h100.run("nvlink", "-s")
    assert "GPU 6: NVIDIA H100 80GB HBM3 (UUID: GPU-4ef109e9-e925-4834-2b85-0771b4ef696c)\n" \
           "NVML: Unable to retrieve NVLink information as all links are inactive\n" in out
    gpu2 = h100.run("nvlink", "-s", "-i", "2")
    assert "\t Link 3: <inactive>" in gpu2 and "\t Link 17: <inactive>" in gpu2 and gpu2.count("GB/s") == 16


def test_fault_gpu_counters(node):
    node.faults({"ecc_uncorrectable": {"gpu": 0, "count": 3}, "row_remap_pending": [{"gpu": 1}],
                 "pcie_degraded": [{"gpu": 2, "width": 8, "gen": 3}], "over_temperature": [{"gpu": 3, "temp": 93}],
                 "power_limit_drift": [{"gpu": 0, "watts": 123}]})
    rows = node.query("ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,"
                      "remapped_rows.pending,pcie.link.width.current,pcie.link.gen.current,temperature.gpu,"
                      "power.limit")
    assert rows[0][:2] == ["3", "3"] and rows[0][6] == "123.00"
    assert rows[1][2] == "Yes" and rows[2][3:5] == ["8", "3"] and rows[3][5] == "93"
    q = node.run("-q")
    blocks = q.split("\nGPU 0000")
    assert "DRAM Uncorrectable                : 3" in blocks[1] or ": 3\n" in blocks[1]
    assert "Pending" in blocks[2] and ": Yes" in blocks[2].split("Remapped Rows")[1][:400]
    assert "93 C" in blocks[4] and "8x" in blocks[3]
    assert "93C" in node.run()


def test_fault_xid_and_dmesg_shim(h100):
    plain = h100.dmesg("-T", "--level=err,warn", "-x")
    assert "NVRM: Xid" not in plain and "NVRM: GPU4 GSP RPC buffer" in plain
    h100.faults({"xid": [{"gpu": 0, "code": 79}, {"gpu": 4, "code": 119}]})
    out = [l for l in h100.dmesg().split("\n") if "Xid" in l]
    assert out[0] == "[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:19:00): 79, pid=2024380, name=nvidia-smi"
    assert out[1].startswith("[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, "
                             "name=nvidia-smi, Timeout after 6s")


def test_infiniband_generator(tmp_path):
    root, net = tmp_path / "sys" / "class" / "infiniband", tmp_path / "hostnet"
    (net / "eth1").mkdir(parents=True)
    (net / "eth1" / "address").write_text("08:c0:eb:21:03:da\n")
    args = [sys.executable, GEN, "--root", str(root), "--net-root", str(net), "--faults",
            str(tmp_path / "faults.json"), "--rate", "400 Gb/sec (4X NDR)", "eth1=192.168.211.242",
            "eth2=198.18.2.7"]
    assert json.loads(subprocess.check_output(args))["changed"] is True
    assert json.loads(subprocess.check_output(args))["changed"] is False
    port = root / "mlx5_0" / "ports" / "1"
    assert (port / "state").read_text() == "4: ACTIVE\n" and (port / "phys_state").read_text() == "5: LinkUp\n"
    assert (port / "link_layer").read_text() == "Ethernet\n"
    # same GIDs as the show_gids fixture for that MAC/IP
    assert (port / "gids" / "0").read_text() == "fe80:0000:0000:0000:0ac0:ebff:fe21:03da\n"
    assert (port / "gids" / "3").read_text() == "0000:0000:0000:0000:0000:ffff:c0a8:d3f2\n"
    assert [(port / "gid_attrs" / "types" / str(i)).read_text() for i in range(4)] == \
        ["IB/RoCE v1\n", "RoCE v2\n", "IB/RoCE v1\n", "RoCE v2\n"]
    assert (root / "mlx5_1" / "ports" / "1" / "gid_attrs" / "ndevs" / "2").read_text() == "eth2\n"
    assert (root / "mlx5_1" / "device" / "net" / "eth2").is_dir()
    # the NIC's settable state beside it: traffic class empty until set, ECN off, left alone once set
    sim_net = tmp_path / "sys" / "class" / "net"
    assert (root / "mlx5_0" / "tc" / "1" / "traffic_class").read_text() == ""
    assert (sim_net / "eth2" / "device" / "infiniband" / "mlx5_1").is_dir()
    ecn = sim_net / "eth1" / "ecn" / "roce_np" / "enable" / "3"
    assert ecn.read_text() == "0\n" and (sim_net / "eth1" / "ecn" / "roce_rp" / "enable" / "7").read_text() == "0\n"
    ecn.write_text("1\n")
    (root / "mlx5_0" / "tc" / "1" / "traffic_class").write_text("106\n")
    assert json.loads(subprocess.check_output(args))["changed"] is False
    assert ecn.read_text() == "1\n" and (root / "mlx5_0" / "tc" / "1" / "traffic_class").read_text() == "106\n"
    (tmp_path / "faults.json").write_text(json.dumps({"rdma_port_down": [{"device": "mlx5_1"}]}))
    assert json.loads(subprocess.check_output(args))["changed"] is True
    down = root / "mlx5_1" / "ports" / "1"
    assert (down / "state").read_text() == "1: DOWN\n" and (down / "phys_state").read_text() == "3: Disabled\n"


def test_fault_over_temperature_shrinks_the_tlimit_margin(tmp_path):
    # The L40S capture records 64 C with a 24 C T.Limit margin (limit 88 C); at 95 C the margin is -7 C.
    l40s = Node(tmp_path, "pcie-l40s-4gpu")
    before = l40s.query("temperature.gpu,temperature.gpu.tlimit")[2]
    l40s.faults({"over_temperature": [{"gpu": 2, "temp": 95}]})
    after = l40s.query("temperature.gpu,temperature.gpu.tlimit")[2]
    assert int(before[0]) + int(before[1]) == 95 + int(after[1]) and after[0] == "95"
    block = l40s.run("-q").split("\nGPU 0000")[3]
    assert "GPU Current Temp                               : 95 C" in block
    assert "GPU T.Limit Temp                               : %s C" % after[1] in block
