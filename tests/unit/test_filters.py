"""filter_plugins: rail addressing (netaddr) and the readiness rows/table."""

import os
import sys

import pytest
from ansible.errors import AnsibleFilterError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "filter_plugins"))

from network import rail_address, rail_capacity  # noqa: E402
from readiness import readiness_row, missing_row, readiness_table  # noqa: E402
from ansible.module_utils.check_result import from_mismatches, from_severity_map  # noqa: E402


@pytest.mark.parametrize("subnet,index,expected", [
    ("198.18.1.0/24", 0, "198.18.1.11"),
    ("198.18.1.0/24", 5, "198.18.1.16"),
    ("198.18.2.0/23", 300, "198.18.3.55"),
    ("2001:db8::/120", 1, "2001:db8::c"),
])
def test_rail_address(subnet, index, expected):
    assert rail_address(subnet, index) == expected


def test_rail_address_prefix_and_capacity():
    assert rail_address("198.18.1.0/24", 2, prefix=True) == "198.18.1.13/24"
    assert rail_capacity("198.18.1.0/24") == 244
    assert rail_capacity("198.18.1.0/28") == 4
    assert rail_capacity("198.18.1.0/30") == 0


@pytest.mark.parametrize("subnet,index,needle", [
    ("198.18.1.0/28", 4, "does not fit in 198.18.1.0/28 (room for 4 nodes"),
    ("198.18.1.0/33", 0, "'198.18.1.0/33' is not a valid subnet"),
    ("rail0", 0, "'rail0' is not a valid subnet"),
    ("198.18.1.0/24", -1, "negative"),
    ("198.18.1.0/24", "x", "not an integer"),
])
def test_rail_address_errors_name_the_input(subnet, index, needle):
    with pytest.raises(AnsibleFilterError) as err:
        rail_address(subnet, index)
    assert needle in str(err.value)


def _ok(check="ok"):
    return {"severity": check, "message": "m"}


def _results(topology_mismatches=(), gpu_checks=None, node_checks=None, rdma_mismatches=()):
    """Module results in the one result format, built by the modules' own converters."""
    gpu_checks = gpu_checks or {}
    gpus = [{"index": i, "checks": dict({"ecc": _ok(), "xid": _ok(), "pcie": _ok(), "temperature": _ok()},
                                        **gpu_checks.get(i, {}))} for i in range(2)]
    node = node_checks or {"count": _ok()}
    checks = [c for g in gpus for c in from_severity_map("GPU%d" % g["index"], g["checks"])]
    return {
        "topology": {"topology": {"gpu_count": 2}, "mismatches": list(topology_mismatches),
                     "checks": from_mismatches(list(topology_mismatches), [("symmetry", "both ways"),
                                                                            ("link_code", "NV18")])},
        "gpu": {"gpus": gpus, "node": node, "checks": checks + from_severity_map("node", node)},
        "rdma": {"ports": [{"device": "mlx5_0"}], "mismatches": list(rdma_mismatches),
                 "checks": from_mismatches(list(rdma_mismatches), [("netdev_mtu", 9000)], subject="mlx5_0/1")},
    }


def test_healthy_row_is_ready():
    row = readiness_row(_results(), "gpu-a1", "rack_a", "hgx-h100-8gpu")
    assert row["ready"] and row["verdict"] == "ready" and row["reasons"] == []
    assert {c: v["status"] for c, v in row["columns"].items()} == dict.fromkeys(
        ("topology", "gpus", "ecc", "xid", "pcie", "rdma"), "ok") | {"fabric": "skip", "nccl": "skip", "dcgm": "skip"}


def test_checks_land_in_their_columns_and_warnings_do_not_gate():
    res = _results(gpu_checks={1: {"ecc": {"severity": "fail", "message": "2 volatile"},
                                   "temperature": {"severity": "warn", "message": "84 C"}}},
                   rdma_mismatches=[{"item": "mlx5_0/1", "check": "netdev_mtu", "expected": 9000, "found": 1500}])
    row = readiness_row(res, "gpu-b1")
    assert not row["ready"]
    assert row["columns"]["ecc"] == {"status": "fail", "reasons": ["GPU1 ecc: 2 volatile"]}
    assert row["columns"]["gpus"]["status"] == "warn"
    assert row["columns"]["rdma"]["reasons"] == ["mlx5_0/1 netdev_mtu: expected 9000, found 1500"]
    assert row["reasons"] == ["ecc: GPU1 ecc: 2 volatile", "rdma: mlx5_0/1 netdev_mtu: expected 9000, found 1500"]
    # a warning is not gating, but the report carries its reason
    assert row["columns"]["gpus"]["reasons"] == ["GPU1 temperature: 84 C"]
    assert "  gpu-b1: (warn) gpus: GPU1 temperature: 84 C" in readiness_table([row]).splitlines()


def test_node_verify_fail_on_decides_which_gpu_statuses_hold_a_node_back():
    """node_verify_fail_on reaches the report: [warn, fail] makes a GPU warning a reason; other columns'
    warnings (fabric, rdma) stay advisory; a value outside warn/fail is refused naming the node."""
    res = _results(gpu_checks={1: {"temperature": {"severity": "warn", "message": "84 C"}}})
    res["fabric"] = {"status": "warn", "reasons": ["rail0: slow"]}
    assert readiness_row(res, "gpu-b1")["ready"]
    assert readiness_row(res, "gpu-b1", gpu_fail_on=["fail"])["ready"]
    row = readiness_row(res, "gpu-b1", "rack_b", "hgx-h100-8gpu", ["warn", "fail"])
    assert not row["ready"] and row["reasons"] == ["gpus: GPU1 temperature: 84 C"]
    for bad in (["ok"], "warn", ["Fail"]):
        with pytest.raises(AnsibleFilterError, match="gpu_fail_on for gpu-b1"):
            readiness_row(res, "gpu-b1", gpu_fail_on=bad)


def test_fabric_verdict_gates_on_fail_only():
    res = _results()
    res["fabric"] = {"status": "warn", "reasons": ["rail0 gpu-a1 -> gpu-a2 (...): too big (gpu-a2 is at fault)"]}
    assert readiness_row(res, "gpu-a1")["ready"]
    res["fabric"] = {"status": "fail", "reasons": ["rail0 gpu-a2 eth1 (198.18.1.12): MTU 1500, the rail is 9000"]}
    row = readiness_row(res, "gpu-a2")
    assert not row["ready"] and row["reasons"] == ["fabric: rail0 gpu-a2 eth1 (198.18.1.12): MTU 1500, the rail is 9000"]
    res["fabric"] = "garbage"
    assert readiness_row(res, "gpu-a2")["columns"]["fabric"]["status"] == "error"


def test_module_that_returned_no_data_is_an_error():
    res = _results()
    res["topology"] = {"failed": True, "msg": "cannot parse nvidia-smi output: row GPU3 has 5 fields"}
    res["gpu"] = {"unreachable": True, "msg": "ssh timeout"}
    res["rdma"] = {"checks": [], "verdict": "fail"}
    row = readiness_row(res, "gpu-a2")
    assert row["columns"]["rdma"] == {"status": "fail", "reasons": ["rdma_health checked nothing"]}
    assert row["columns"]["topology"] == {"status": "error",
                                          "reasons": ["cannot parse nvidia-smi output: row GPU3 has 5 fields"]}
    assert row["columns"]["xid"]["status"] == "error"
    assert not row["ready"]


def test_table_lists_every_node_and_the_reasons():
    rows = [readiness_row(_results(), "gpu-a1", "rack_a"),
            readiness_row(_results(topology_mismatches=[{"item": "GPU0-GPU1", "check": "link_code",
                                                         "expected": "NV18", "found": "NV12"}]), "gpu-a2", "rack_a"),
            missing_row("gpu-b1", "unreachable", "rack_b")]
    table = readiness_table(rows)
    lines = table.splitlines()
    assert lines[0].split() == ["NODE", "RACK", "TOPOLOGY", "GPUS", "ECC", "XID", "PCIE", "RDMA", "FABRIC",
                                "NCCL", "DCGM", "VERDICT"]
    assert lines[2].split() == ["gpu-a1", "rack_a", "ok", "ok", "ok", "ok", "ok", "ok", "skip", "skip", "skip",
                                "ready"]
    assert lines[3].split()[-2:] == ["NOT", "READY"] and lines[3].split()[2] == "fail"
    assert "1 of 3 nodes ready" in table
    assert "gpu-a2: topology: GPU0-GPU1 link_code: expected NV18, found NV12" in table
    assert "gpu-b1: node: unreachable" in table


def test_bad_input_is_named():
    with pytest.raises(AnsibleFilterError, match="gpu-a1"):
        readiness_row(None, "gpu-a1")
    with pytest.raises(AnsibleFilterError, match="rows must be a list"):
        readiness_table({"a": 1})


def test_markdown_report_has_the_table_reasons_and_link_matrix():
    from readiness import readiness_markdown
    rows = [readiness_row(_results(), "gpu-a1", "rack_a", "hgx-h100-8gpu"),
            missing_row("gpu-b1", "unreachable", "rack_b")]
    details = {"gpu-a1": {"topology": {"gpus": ["GPU0", "GPU1"], "nics": ["mlx5_0"],
                                       "links": {"GPU0": {"GPU1": "NV18", "mlx5_0": "PXB"},
                                                 "GPU1": {"GPU0": "NV18", "mlx5_0": "SYS"}}}}}
    md = readiness_markdown(rows, details, "gpulab").splitlines()
    assert md[0] == "# Cluster readiness: gpulab" and "1 of 2 nodes ready." in md
    assert "| gpu-a1 | rack_a | hgx-h100-8gpu | ok | ok | ok | ok | ok | ok | skip | skip | skip | **ready** |" in md
    assert "## gpu-b1: not ready" in md and "- node: unreachable" in md
    assert "| | GPU0 | GPU1 | mlx5_0 |" in md
    assert "| GPU0 | X | NV18 | PXB |" in md and "| GPU1 | NV18 | X | SYS |" in md
    assert "## gpu-b1: GPU link matrix" not in md
