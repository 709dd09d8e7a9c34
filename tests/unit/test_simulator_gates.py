"""The lab simulator's acceptance-gate tools: all_reduce_perf, mpirun and dcgmi (lab/simulator/nvidia_smi.py
invoked under those names), replaying the recorded runs and injecting nccl_busbw_low / dcgm_diag_fail."""
import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible.module_utils.dcgm_parsers import diag_causes, parse_dcgmi_diag, summarize
from ansible.module_utils.gpu_parsers import ParseError
from ansible.module_utils.nccl_parsers import bandwidth_findings, parse_nccl_tests

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(REPO, "lab", "simulator", "nvidia_smi.py")
FIX = os.path.join(REPO, "tests", "fixtures")
PROFILES = ["hgx-h100-8gpu", "hgx-a100-8gpu", "pcie-l40s-4gpu"]
with open(os.path.join(REPO, "playbooks", "vars", "hardware_profiles.yml")) as _handle:
    CATALOGUE = yaml.safe_load(_handle)


def required(profile, scope="single"):
    model = CATALOGUE["hardware_profiles"][profile]["acceptance_model"]
    return CATALOGUE["acceptance_thresholds"][model]["nccl_%s_node_busbw_gbps" % scope]


class Node:
    def __init__(self, tmp, profile):
        self.tmp, self.profile = tmp, profile
        self.env = dict(os.environ, GPUSIM_PROFILES=os.path.join(REPO, "lab", "simulator", "profiles"),
                        GPUSIM_FIXTURES=FIX, GPUSIM_PROFILE=profile,
                        GPUSIM_STATE=str(tmp / "state.json"), GPUSIM_FAULTS=str(tmp / "faults.json"))
        with open(os.path.join(REPO, "lab", "simulator", "profiles", profile + ".json")) as handle:
            self.files = json.load(handle)["files"]
        for name in ("all_reduce_perf", "dcgmi", "mpirun", "nvidia-smi"):
            (tmp / name).symlink_to(SIM)

    def run(self, prog, *args, rc=0):
        proc = subprocess.run([sys.executable, "-I", "-S", str(self.tmp / prog)] + list(args), env=self.env,
                              capture_output=True, text=True, check=False)
        assert proc.returncode == rc, (proc.returncode, proc.stdout + proc.stderr)
        return proc.stdout

    def mpirun(self, *args, rc=0):
        """mpirun execs its program: give it the interpreter so the test needs no shebang on PATH."""
        return self.run("mpirun", *args, rc=rc)

    def faults(self, data):
        (self.tmp / "faults.json").write_text(json.dumps(data))

    def fixture(self, key):
        with open(os.path.join(FIX, self.files[key]), newline="") as handle:
            return handle.read()


@pytest.fixture(params=PROFILES)
def node(request, tmp_path):
    return Node(tmp_path, request.param)


ALLREDUCE_ARGS = ["-b", "1G", "-e", "16G", "-f", "2", "-n", "20", "-w", "5", "-c", "1", "-g", "8"]


def test_all_reduce_perf_replays_the_recording_and_passes_the_profile_threshold(node):
    out = node.run("all_reduce_perf", *ALLREDUCE_ARGS)
    assert out == node.fixture("nccl_allreduce")
    gate = bandwidth_findings(parse_nccl_tests(out), required(node.profile), "largest")
    assert gate["failures"] == [], gate


def test_busbw_low_scales_rows_and_average_and_fails_the_gate(node):
    healthy = parse_nccl_tests(node.run("all_reduce_perf", *ALLREDUCE_ARGS))
    node.faults({"nccl_busbw_low": {"factor": 0.5}})
    out = node.run("all_reduce_perf", *ALLREDUCE_ARGS)
    low = parse_nccl_tests(out)
    assert len(low["results"]) == len(healthy["results"]) > 0
    for a, b in zip(healthy["results"], low["results"]):
        assert b["size_bytes"] == a["size_bytes"] and b["wrong_oop"] == a["wrong_oop"]
        for key in ("busbw_oop", "busbw_ip", "algbw_oop", "algbw_ip"):
            assert b[key] == pytest.approx(a[key] * 0.5, abs=0.006), (key, a, b)
        assert b["time_us_oop"] == pytest.approx(a["time_us_oop"] / 0.5, rel=0.01)
    assert low["avg_busbw_gbps"] == pytest.approx(healthy["avg_busbw_gbps"] * 0.5, abs=0.001)
    # columns stay where nccl-tests prints them: every row line keeps its length
    for old, new in zip(node.fixture("nccl_allreduce").split("\n"), out.split("\n")):
        assert len(new) == len(old), (old, new)
    threshold = required(node.profile)
    gate = bandwidth_findings(low, threshold, "largest")
    if threshold is not None:
        assert gate["failures"] and "below the required %.2f GB/s" % threshold in gate["failures"][0]
    else:  # L40S: no published mark, the halved run is still measured
        assert gate["measured_busbw_gbps"] == pytest.approx(14.47 * 0.5, abs=0.01)


def test_all_reduce_perf_rejects_unknown_options(tmp_path):
    node = Node(tmp_path, "hgx-h100-8gpu")
    assert "invalid option" in node.run("all_reduce_perf", "--frobnicate", rc=1)
    assert "requires an argument" in node.run("all_reduce_perf", "-b", rc=1)
    assert node.run("all_reduce_perf", "-b1G", "--maxbytes=16G") == node.fixture("nccl_allreduce")


def test_mpirun_runs_the_multi_node_recording_once_locally(tmp_path):
    node = Node(tmp_path, "hgx-h100-8gpu")
    argv = ["--allow-run-as-root", "-np", "16", "-H", "198.18.1.11:8,198.18.1.12:8", "--mca", "btl", "tcp,self",
            "-x", "NCCL_IB_HCA=mlx5_0", "--bind-to", "numa", str(tmp_path / "all_reduce_perf")] + ALLREDUCE_ARGS
    out = node.mpirun(*argv)
    assert out == node.fixture("nccl_allreduce_multi_node")
    assert parse_nccl_tests(out)["avg_busbw_gbps"] == 373.187
    gate = bandwidth_findings(parse_nccl_tests(out), required("hgx-h100-8gpu", "multi"), "largest")
    assert gate["failures"] == []


@pytest.mark.parametrize("argv, message", [
    (["-np", "24", "-H", "a:8,b:8"], "not enough slots"),
    (["-H", "a:8"], "give -np N and -H"),
    (["-np", "8"], "give -np N and -H"),
    (["-np", "8", "-H", "a:x"], "bad -H entry"),
])
def test_mpirun_refuses_bad_launches(tmp_path, argv, message):
    node = Node(tmp_path, "hgx-h100-8gpu")
    assert message in node.mpirun(*(argv + [str(tmp_path / "all_reduce_perf")]), rc=1)
    assert "no executable" in node.mpirun("-np", "8", "-H", "a:8", rc=1)


def test_dcgmi_passes_with_persistence_on_and_names_gpus_with_it_off(node):
    node.run("nvidia-smi", "-pm", "1")
    for args in (["diag", "-r", "1"], ["diag", "-r", "1", "-j"]):
        parsed = parse_dcgmi_diag(node.run("dcgmi", *args))
        assert summarize(parsed) == {"pass": 9, "fail": 0, "warn": 0, "skip": 0}
        assert parsed["version"] == "3.1.8"
    assert node.run("dcgmi", "diag", "-r", "1") == node.fixture("dcgmi_diag")
    node.run("nvidia-smi", "-i", "2", "-pm", "0")
    for args in (["diag", "-r", "1"], ["diag", "-r", "1", "-j"]):
        parsed = parse_dcgmi_diag(node.run("dcgmi", *args, rc=226))
        assert diag_causes(parsed) == [{
            "cause": "persistence_mode_off", "test": "Persistence Mode", "status": "Fail", "gpus": ["2"],
            "message": "Persistence mode for GPU 2 is currently disabled. The DCGM diagnostic requires peristence "
                       "mode to be enabled. Enable persistence mode by running \"nvidia-smi -i <gpuId> -pm 1 \" "
                       "as root."}]


def test_dcgmi_all_gpus_off_is_cut_like_the_recording(tmp_path):
    node = Node(tmp_path, "hgx-a100-8gpu")  # the A100 recording starts with persistence mode Disabled
    recorded = parse_dcgmi_diag(open(os.path.join(FIX, "dcgmi_diag_r1_8xH200_azure_ndv5_persistence_fail.txt")).read())
    text = node.run("dcgmi", "diag", "-r", "1", rc=226)
    parsed = parse_dcgmi_diag(text)
    assert parsed["tests"][4]["messages"] == recorded["tests"][4]["messages"]
    # same table, line for line, as the real 8-GPU failing run
    with open(os.path.join(FIX, "dcgmi_diag_r1_8xH200_azure_ndv5_persistence_fail.txt")) as handle:
        assert text == handle.read()


def test_dcgm_diag_fail_fault_names_test_and_gpu(tmp_path):
    node = Node(tmp_path, "hgx-h100-8gpu")
    node.faults({"dcgm_diag_fail": [{"test": "Inforom", "gpu": 5}, {"test": "Persistence Mode", "gpu": 3}]})
    for args in (["diag", "-r", "1"], ["diag", "-r", "1", "-i", "0,1", "-j"]):
        causes = diag_causes(parse_dcgmi_diag(node.run("dcgmi", *args, rc=226)))
        assert [(c["test"], c["cause"], c["gpus"]) for c in causes] == [
            ("Persistence Mode", "persistence_mode_off", ["3"]), ("Inforom", "inforom_corrupt", ["5"])], causes
    node.faults({})
    assert summarize(parse_dcgmi_diag(node.run("dcgmi", "diag", "-r", "1", "-j")))["fail"] == 0


@pytest.mark.parametrize("argv, rc, message", [
    (["discovery", "-l"], 1, "only 'diag'"),
    (["diag", "-r", "3"], 1, "only level 1"),
    (["diag", "-r", "1", "--bogus"], 255, "Unknown option"),
])
def test_dcgmi_refuses_what_no_recording_answers(tmp_path, argv, rc, message):
    assert message in Node(tmp_path, "hgx-h100-8gpu").run("dcgmi", *argv, rc=rc)


def test_truncated_replay_is_a_clear_parse_error(tmp_path):
    """A cut-off recording (as a crashed run prints) fails the parser by name, not with a traceback."""
    node = Node(tmp_path, "hgx-h100-8gpu")
    text = node.run("all_reduce_perf")
    with pytest.raises(ParseError, match="without the '# Avg bus bandwidth' line"):
        parse_nccl_tests(text.split("# Out of bounds")[0])
