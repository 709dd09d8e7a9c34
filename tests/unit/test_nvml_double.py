"""gpu_health's NVML path end to end on the lab's NVML double: the real nvidia-ml-py (pynvml, as the
nvidia_driver role pins it) loads tests/apt_repo/nvml_shim.c built as libnvidia-ml.so.1, which answers from the
lab simulator's replay of recorded outputs. The records and the verdict must equal those of the nvidia-smi path
on the same simulated node, healthy and with faults; a dump the library cannot account for fails NVML's init."""
import json
import os
import subprocess
import sys

import pytest

from ansible.module_utils.gpu_health_pass import evaluate_pass, reads

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(REPO, "lab", "simulator", "nvidia_smi.py")
SHIM = os.path.join(REPO, "tests", "apt_repo", "nvml_shim.c")
PROFILES = {"hgx-h100-8gpu": {"gpu_count": 8, "nvswitch": True}, "hgx-a100-8gpu": {"gpu_count": 8},
            "pcie-l40s-4gpu": {"gpu_count": 4}}
FAULTS = {"ecc_uncorrectable": [{"gpu": 1, "count": 2}], "over_temperature": [{"gpu": 2, "temp": 95}],
          "row_remap_pending": [{"gpu": 3}], "pcie_degraded": [{"gpu": 0, "width": 8, "gen": 3}],
          "power_limit_drift": [{"gpu": 1, "watts": 300}]}
GATHER = """
import json, sys
import ansible.module_utils
ansible.module_utils.__path__.insert(0, sys.argv[1])
import pynvml
from ansible.module_utils.gpu_nvml import gather_nvml
try:
    print(json.dumps({"records": gather_nvml(pynvml)}))
except pynvml.NVMLError as e:
    print(json.dumps({"error": str(e)}))
"""


@pytest.fixture(scope="module")
def libdir(tmp_path_factory):
    out = tmp_path_factory.mktemp("nvml")
    lib = out / "libnvidia-ml.so.570.133.20"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-std=gnu11",
                    "-Wl,-soname,libnvidia-ml.so.1", "-o", str(lib), SHIM], check=True)
    (out / "libnvidia-ml.so.1").symlink_to(lib.name)
    return out


def _env(tmp_path, profile, faults=None, simulator=SIM):
    faults_file = tmp_path / "faults.json"
    faults_file.write_text(json.dumps(faults or {}))
    return dict(os.environ, GPUSIM_PROFILES=os.path.join(REPO, "lab", "simulator", "profiles"),
                GPUSIM_FIXTURES=os.path.join(REPO, "tests", "fixtures"), GPUSIM_PROFILE=profile,
                GPUSIM_STATE=str(tmp_path / "state.json"), GPUSIM_FAULTS=str(faults_file),
                GPUSIM_SIMULATOR=simulator)


def _nvml(libdir, env):
    env = dict(env, LD_LIBRARY_PATH=str(libdir))
    proc = subprocess.run([sys.executable, "-c", GATHER, os.path.join(REPO, "module_utils")], env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _smi_results(env):
    out = {}
    for key, argv in reads(smi=SIM):
        proc = subprocess.run(argv, env=dict(env, GPUSIM_TOOL="nvidia-smi"), capture_output=True, text=True,
                              check=False)
        out[key] = (proc.returncode, proc.stdout, proc.stderr)
    return out


@pytest.mark.parametrize("faulted", [False, True], ids=["healthy", "faults"])
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_nvml_and_nvidia_smi_give_the_same_records_and_verdict(libdir, tmp_path, profile, faulted):
    faults = dict(FAULTS, gpu_missing=[{"gpu": 6}]) if faulted and PROFILES[profile]["gpu_count"] == 8 else FAULTS
    env = _env(tmp_path, profile, faults if faulted else None)
    nvml = _nvml(libdir, env)
    assert "records" in nvml, nvml
    expected = PROFILES[profile]
    by_smi = evaluate_pass(_smi_results(env), expected)
    by_nvml = evaluate_pass({}, expected, records=nvml["records"])
    differ = [(r["index"], k, r[k], s.get(k)) for r, s in zip(by_nvml["records"], by_smi["records"])
              for k in set(r) | set(s) if r.get(k) != s.get(k)]
    assert not differ, differ
    assert by_nvml["records"] == by_smi["records"]
    assert by_nvml["checks"] == by_smi["checks"]
    assert by_nvml["verdict"] == by_smi["verdict"]
    missing = len(faults.get("gpu_missing", [])) if faulted else 0
    assert len(nvml["records"]) == expected["gpu_count"] - missing
    assert (by_nvml["node"]["count"]["severity"] == "ok") == (missing == 0)
    if faulted:
        failed = by_nvml["summary"]["failed_checks"]
        assert "GPU1 ecc" in failed and "GPU3 row_remap" in failed and "GPU0 pcie" in failed, failed
        assert nvml["records"][2]["temperature_c"] == 95
        assert nvml["records"][1]["power_limit_w"] == 300.0
    if profile == "hgx-h100-8gpu":
        assert {r["fabric_state"] for r in nvml["records"]} == {"Completed"}


def test_without_the_simulator_nvml_reports_the_driver_not_loaded(libdir, tmp_path):
    result = _nvml(libdir, _env(tmp_path, "hgx-h100-8gpu", simulator=str(tmp_path / "absent")))
    assert result == {"error": "Driver Not Loaded"}


@pytest.mark.parametrize("mutation", ["drop_field", "duplicate_field", "truncated", "no_driver", "exit_1"])
def test_a_dump_it_cannot_account_for_fails_init(libdir, tmp_path, mutation):
    """The double fails closed: a field missing or twice, a line cut short, no driver line or a failed run
    make nvmlInit fail instead of yielding made-up values."""
    real = subprocess.run([SIM], env=dict(_env(tmp_path, "hgx-h100-8gpu"), GPUSIM_TOOL="nvml"),
                          capture_output=True, text=True, check=True).stdout
    lines = real.split("\n")
    rc = 0
    if mutation == "drop_field":
        lines[1] = "\t".join(f for f in lines[1].split("\t") if not f.startswith("temperature="))
    elif mutation == "duplicate_field":
        lines[2] += "\tpower_mw=1"
    elif mutation == "truncated":
        lines = lines[:3] + [lines[3][:40]]
    elif mutation == "no_driver":
        lines = lines[1:]
    else:
        rc = 1
    dump = tmp_path / "dump.txt"
    dump.write_text("\n".join(lines))
    fake = tmp_path / "sim"
    fake.write_text("#!/bin/sh\ncat %s\nexit %d\n" % (dump, rc))
    fake.chmod(0o755)
    assert _nvml(libdir, _env(tmp_path, "hgx-h100-8gpu", simulator=str(fake))) == {"error": "Unknown Error"}
