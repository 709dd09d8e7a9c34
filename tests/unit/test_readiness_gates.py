"""Acceptance gates in the readiness report: nccl_bandwidth and dcgm_diag results (from the modules run over
the recorded outputs) become the nccl and dcgm columns with measured against required; the multi-node
launcher is rendered per profile over the rail addresses."""
import os
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError

import dcgm_diag
import nccl_bandwidth
from ansible.module_utils.check_result import check
from ansible.module_utils.nccl_parsers import bandwidth_findings, parse_nccl_tests
from helpers import fixture, run_module

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "filter_plugins"))
from readiness import nccl_multi_node_runs, readiness_gates, readiness_markdown, readiness_row  # noqa: E402

GB300 = 'nccl_allreduce_4xGB300_singlenode_newformat_truncated_oci.txt'
H100_64 = 'nccl_allreduce_h100_64gpu_sharp_partial_coreweave.txt'
DCGM_FAIL = 'dcgmi_diag_r1_8xH200_azure_ndv5_persistence_fail.txt'
DCGM_PASS = 'derived/dcgmi/diag_r1_pass.json'
NCCL_BINS = {'all_reduce_perf': '/usr/bin/all_reduce_perf'}
DCGM_BINS = {'dcgmi': '/usr/bin/dcgmi'}


def nccl(text, **args):
    res, failed, _ = run_module(nccl_bandwidth.main, dict({'gpus': 8, 'metric': 'largest'}, **args),
                                {lambda argv: True: (0, text, '')}, bins=NCCL_BINS)
    return res


def dcgm(text, rc=0):
    res, failed, _ = run_module(dcgm_diag.main, {'json': False}, {lambda argv: True: (rc, text, '')},
                                bins=DCGM_BINS)
    return res


def base():
    ok = [check("count", "node", "ok", 8, 8, "as expected")]
    return {"topology": {"topology": {}, "mismatches": [], "checks": ok},
            "gpu": {"gpus": [{"index": 0, "checks": {}}], "node": {}, "checks": ok},
            "rdma": {"ports": [], "mismatches": [], "checks": ok}}


def test_thresholds_cover_every_model_and_every_profile_names_one():
    with open(os.path.join(REPO, "playbooks", "vars", "hardware_profiles.yml")) as handle:
        cat = yaml.safe_load(handle)
    table = cat["acceptance_thresholds"]
    assert set(table) == {"H100", "H200", "A100", "GB200", "L40S"}
    assert table["H100"]["nccl_single_node_busbw_gbps"] == 460.0
    assert table["H200"]["nccl_single_node_busbw_gbps"] == 431.0
    assert table["A100"]["nccl_single_node_busbw_gbps"] == 228.0
    assert table["GB200"]["nccl_single_node_busbw_gbps"] == 432.0
    for model, row in table.items():
        assert set(row) == {"nccl_single_node_busbw_gbps", "nccl_multi_node_busbw_gbps"}, model
        for value in row.values():
            assert value is None or 0 < value < 1000, (model, row)
    for name, profile in cat["hardware_profiles"].items():
        assert profile["acceptance_model"] in table, name
        assert profile["gpu_name"].split()[1].startswith(profile["acceptance_model"][:4]), name


def test_largest_metric_compares_the_largest_size():
    parsed = parse_nccl_tests(fixture(GB300))
    gate = bandwidth_findings(parsed, 700, 'largest')
    assert gate['measured_busbw_gbps'] == 685.27 and gate['metric'] == 'largest'
    assert gate['failures'][0].startswith('bus bandwidth at the largest size (17179869184 B) 685.27 GB/s is below '
                                          'the required 700.00 GB/s')
    assert bandwidth_findings(parsed, 460, 'largest')['ok']
    assert not bandwidth_findings(parsed, 460, 'avg')['ok']  # avg 446.673 over the sweep
    with pytest.raises(ValueError, match="metric must be"):
        bandwidth_findings(parsed, 1, 'median')


def test_passing_gates_are_ok_with_measured_and_required():
    results = dict(base(), nccl=nccl(fixture(GB300), min_busbw_gbps=460), dcgm=dcgm(fixture(DCGM_PASS)))
    row = readiness_row(results, "gpu-a1", "rack_a", "hgx-h100-8gpu")
    assert row["ready"], row["reasons"]
    assert row["columns"]["nccl"] == {"status": "ok", "reasons": []}
    assert row["columns"]["dcgm"] == {"status": "ok", "reasons": []}
    g = row["gates"]["nccl"]
    assert (g["measured_busbw_gbps"], g["required_busbw_gbps"], g["metric"]) == (685.27, 460.0, "largest")
    assert row["gates"]["dcgm"]["summary"] == {"pass": 9, "fail": 0, "warn": 0, "skip": 0}
    assert row["gates"]["nccl_multi_node"]["status"] == "skip"


def registered(result):
    """What `register:` holds under node_verify's `failed_when: false`: Ansible rewrites 'failed'."""
    return dict(result, failed=False)


def test_low_bandwidth_and_failed_diag_make_the_node_not_ready_naming_the_gate():
    low = fixture(GB300).replace('681.03', '340.51').replace('681.15', '340.57').replace(
        '685.19', '342.60').replace('685.27', '342.63')
    results = dict(base(), nccl=registered(nccl(low, min_busbw_gbps=460)),
                   dcgm=registered(dcgm(fixture(DCGM_FAIL), rc=226)))
    row = readiness_row(results, "gpu-a2", "rack_a", "hgx-h100-8gpu")
    assert not row["ready"] and row["verdict"] == "NOT READY"
    assert row["columns"]["nccl"]["status"] == "fail" and row["columns"]["dcgm"]["status"] == "fail"
    assert row["reasons"][0].startswith("nccl: single-node: bus bandwidth at the largest size (17179869184 B) "
                                        "342.63 GB/s is below the required 460.00 GB/s")
    assert row["reasons"][1] == "dcgm: level 1 Persistence Mode fail (persistence_mode_off, GPU 0,1,2,3,4,5)"
    assert row["gates"]["dcgm"]["failed_tests"] == [{"test": "Persistence Mode", "status": "Fail",
                                                     "cause": "persistence_mode_off",
                                                     "gpus": ["0", "1", "2", "3", "4", "5"]}]
    md = readiness_markdown([row], {}, "lab")
    assert "| gpu-a2 | NCCL all-reduce single-node (largest) | 342.63 GB/s | 460.00 GB/s | fail |" in md
    assert "| gpu-a2 | DCGM diag level 1 | 8 pass, 1 fail, 0 warn, 0 skip | no test in Fail | fail |" in md


def test_gate_that_cannot_run_is_an_error_and_check_mode_is_skip():
    res, failed, _ = run_module(nccl_bandwidth.main, {}, {}, bins={})
    assert failed
    crashed = nccl(fixture(GB300).split('# Out of bounds')[0])
    row = readiness_row(dict(base(), nccl=res, dcgm={"failed": True, "msg": "dcgmi is not on PATH", "cmd": []}),
                        "gpu-b1")
    assert row["columns"]["nccl"] == {"status": "error", "reasons": [
        "single-node: all_reduce_perf (nccl-tests) is not on PATH; install nccl-tests or give path"]}
    assert row["columns"]["dcgm"] == {"status": "error", "reasons": ["dcgmi is not on PATH"]}
    assert readiness_row(dict(base(), nccl=crashed), "gpu-b1")["columns"]["nccl"]["reasons"][0].startswith(
        "single-node: cannot use the all_reduce_perf output (rc=0): nccl-tests output ends after 2 result rows")
    res, _, _ = run_module(nccl_bandwidth.main, {}, {}, bins=NCCL_BINS, check_mode=True)
    gates = readiness_gates(dict(base(), nccl=res,
                                 dcgm={"skipped": True, "skip_reason": "Conditional result was False"}))
    assert gates["nccl"]["status"] == "skip" and gates["nccl"]["reasons"] == ["not run in check mode"]
    assert gates["dcgm"]["status"] == "skip"
    assert readiness_row(dict(base(), nccl=res), "gpu-b1")["ready"]
    with pytest.raises(AnsibleFilterError, match="results must be a dict"):
        readiness_gates(None)


def test_multi_node_failure_lands_in_the_nccl_column():
    mn = dict(registered(nccl(fixture(H100_64), gpus=1, min_busbw_gbps=400)), hosts=["gpu-a1", "gpu-a2"])
    row = readiness_row(dict(base(), nccl=nccl(fixture(GB300), min_busbw_gbps=460), nccl_multi_node=mn), "gpu-a1")
    assert row["columns"]["nccl"]["status"] == "fail"
    assert row["columns"]["nccl"]["reasons"] == [
        "multi-node: bus bandwidth at the largest size (8589934592 B) 386.56 GB/s is below the required 400.00 GB/s; "
        "the weakest size was 536870912 B at 356.60 GB/s (92% of the best, 386.56 GB/s at 8589934592 B)"]
    assert row["gates"]["nccl_multi_node"]["hosts"] == ["gpu-a1", "gpu-a2"]
    assert row["gates"]["nccl_multi_node"]["cmd"][:2] == ["/usr/bin/all_reduce_perf", "-b"]
    single = readiness_row(dict(base(), nccl_multi_node={"skipped": True, "skip_reason": "only node"}), "gpu-b3")
    assert single["columns"]["nccl"]["status"] == "skip" and single["ready"]


NODES = [
    {"host": "gpu-a2", "profile": "hgx-h100-8gpu", "address": "198.18.1.12", "gpus": 8, "min_busbw_gbps": 48.0},
    {"host": "gpu-a1", "profile": "hgx-h100-8gpu", "address": "198.18.1.11", "gpus": 8, "min_busbw_gbps": 48.0},
    {"host": "gpu-b3", "profile": "pcie-l40s-4gpu", "address": "198.18.1.16", "gpus": 4, "min_busbw_gbps": None},
]


def test_multi_node_launcher_is_rendered_per_profile_over_the_rail():
    runs = nccl_multi_node_runs(NODES, "198.18.1.0/24", ["--mca", "pml", "ucx"], {"NCCL_IB_HCA": "mlx5_0,mlx5_1"})
    assert [r["profile"] for r in runs] == ["hgx-h100-8gpu", "pcie-l40s-4gpu"]
    h100, l40s = runs
    assert h100["launch_host"] == "gpu-a1" and h100["hosts"] == ["gpu-a1", "gpu-a2"] and h100["np"] == 16
    assert h100["launcher"] == [
        "mpirun", "--allow-run-as-root", "-np", "16", "-H", "198.18.1.11:8,198.18.1.12:8", "--map-by", "ppr:8:node",
        "--mca", "oob_tcp_if_include", "198.18.1.0/24", "--mca", "btl_tcp_if_include", "198.18.1.0/24",
        "-x", "NCCL_IB_HCA=mlx5_0,mlx5_1", "--mca", "pml", "ucx"]
    assert h100["min_busbw_gbps"] == 48.0 and h100["skip_reason"] is None
    assert l40s["np"] == 4 and l40s["min_busbw_gbps"] is None
    assert l40s["skip_reason"] == "only node of profile pcie-l40s-4gpu in the play: a multi-node run needs two"


@pytest.mark.parametrize("nodes, message", [
    ([], "non-empty list"),
    ([{"host": "gpu-a1", "profile": "p", "gpus": 8}], "lacks address"),
    ([dict(NODES[0]), dict(NODES[1], gpus=4)], "different GPU counts"),
])
def test_multi_node_plan_rejects_bad_input(nodes, message):
    with pytest.raises(AnsibleFilterError, match=message):
        nccl_multi_node_runs(nodes, "198.18.1.0/24")
