"""The driver package set per repository layout, checked against the strings of
../shared/fixtures/nvidia-packages.md, and the pre-install check of what the repositories offer."""

import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given, strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "filter_plugins"))

from nvidia_packages import nvidia_driver_package_set as pset, nvidia_package_problems, parse_madison  # noqa: E402

NVS = ["fabricmanager", "nscq"]


def test_cuda_ubuntu_570_open_names_as_the_reference():
    s = pset("570.133.20", "cuda-ubuntu", "open", NVS, "n1")
    # §1.1: nvidia-driver-570-open=570.133.20-0ubuntu1 ... nvidia-fabricmanager-570=570.133.20-1, libnvidia-nscq-570
    assert s["driver"][:2] == ["nvidia-driver-570-open", "nvidia-dkms-570-open"]
    assert {"nvidia-kernel-common-570", "nvidia-utils-570", "libnvidia-compute-570"} <= set(s["driver"])
    assert s["extras"] == ["nvidia-fabricmanager-570", "libnvidia-nscq-570"]
    assert s["pin"] == "570.133.20-*" and s["pinning_package"] is None and s["cuda_major"] == 12


def test_r580_extras_lose_the_branch():
    s = pset("580.126.09", "cuda-ubuntu", "open", NVS + ["nvsdm", "nvlsm", "imex"], "n1")
    # §1.5/§4.1: nvidia-fabricmanager, libnvidia-nscq, libnvsdm, nvidia-imex unbranched; nvlsm unpinned
    assert s["extras"] == ["nvidia-fabricmanager", "libnvidia-nscq", "libnvsdm", "nvidia-imex"]
    assert s["unpinned"] == ["nvlsm"] and s["driver"][0] == "nvidia-driver-580-open" and s["cuda_major"] == 13


def test_r590_ubuntu_unbranched_with_pinning_package():
    s = pset("590.48.01", "cuda-ubuntu", "open", NVS, "n1")
    assert s["pinning_package"] == "nvidia-driver-pinning-590.48.01" and s["packages"][0] == s["pinning_package"]
    assert "libnvidia-compute" in s["driver"] and "nvidia-dkms-open" in s["driver"]


def test_canonical_server_names_with_cuda_repo_extras():
    s = pset("570.133.20", "canonical", "open", NVS, "n1")
    assert s["driver"][0] == "nvidia-driver-570-server-open"
    assert "nvidia-kernel-common-570-server" in s["driver"] and s["extras"][0] == "nvidia-fabricmanager-570"
    assert pset("590.48.01", "canonical", "proprietary", [], "n1")["pinning_package"] is None


def test_debian_unbranched_names():
    s = pset("535.161.08", "debian", "proprietary", NVS, "n1")
    assert s["driver"][0] == "nvidia-kernel-dkms" and "nvidia-smi" in s["driver"] and "libnvidia-ml1" in s["driver"]
    assert s["extras"] == ["nvidia-fabricmanager-535", "libnvidia-nscq-535"]
    assert pset("535.161.08", "debian", "open", [], "n1")["driver"][0] == "nvidia-kernel-open-dkms"


@pytest.mark.parametrize("args,expect", [
    (("570.133.20-0ubuntu1", "cuda-ubuntu"), "n9: nvidia_driver_version '570.133.20-0ubuntu1'"),
    (("570.133.20", "rhel"), "repository layout 'rhel'"),
    (("570.133.20", "debian", "closed"), "nvidia_driver_kernel_modules 'closed'"),
    (("570.133.20", "debian", "open", ["fm"]), "nvidia_driver_extras has fm"),
])
def test_bad_input_names_variable_and_host(args, expect):
    with pytest.raises(AnsibleFilterError, match=expect.replace(".", r"\.")):
        pset(*args, host="n9")


MADISON = """nvidia-driver-570 | 570.148.08-1ubuntu1 | http://127.0.0.1:8765/ubuntu2204 Packages
nvidia-driver-570 | 570.133.20-0ubuntu1 | http://127.0.0.1:8765/ubuntu2204 Packages
nvidia-fabricmanager-570 | 570.133.20-1 | http://127.0.0.1:8765/ubuntu2204 Packages
"""


def test_fabricmanager_mismatch_gives_nvidias_reason():
    s = pset("570.148.08", "cuda-ubuntu", "proprietary", ["fabricmanager"], "n1")
    s = dict(s, driver=["nvidia-driver-570"])
    problems = nvidia_package_problems(MADISON, s, "n1")
    assert problems == ["n1: nvidia-fabricmanager-570 has 570.133.20-1, not 570.148.08: fabric manager NVIDIA GPU "
                        "driver interface version 570.133.20 don't match with driver version 570.148.08. Please "
                        "update with matching NVIDIA driver package."]
    ok = dict(pset("570.133.20", "cuda-ubuntu", "proprietary", ["fabricmanager"], "n1"), driver=["nvidia-driver-570"])
    assert nvidia_package_problems(MADISON, ok, "n1") == []


def test_missing_package_and_pinning_package_named():
    s = pset("590.48.01", "cuda-ubuntu", "open", [], "n1")
    problems = nvidia_package_problems("", s, "n1")
    assert "n1: nvidia-driver-open: no version 590.48.01-* in the configured repositories (they have: none)" in problems
    assert "n1: nvidia-driver-pinning-590.48.01 is not in the configured repositories" in problems


@given(st.text(max_size=400))
def test_madison_parser_never_raises(text):
    found = parse_madison(text)
    assert all(isinstance(v, list) and v for v in found.values())
    s = pset("570.133.20", "debian", "open", NVS, "n1")
    assert isinstance(nvidia_package_problems(text, s, "n1"), list)
