"""The lab's DOCA-OFED tool double (tests/apt_repo/mlnx_tools.py): it answers from recorded mlnx_qos outputs,
keeps the state the rdma_roce QoS script sets, and what it prints is what rdma_health's parser reads."""

import os
import subprocess
import sys
from pathlib import Path

from ansible.module_utils.rdma_parsers import parse_mlnx_qos

ROOT = Path(__file__).resolve().parents[2]
TOOL = str(ROOT / "tests" / "apt_repo" / "mlnx_tools.py")


def run(tmp_path, prog, *args):
    env = dict(os.environ, GPULAB_NIC_STATE=str(tmp_path / "run"), GPULAB_NIC_DATA=str(ROOT / "tests" / "fixtures"),
               GPULAB_NIC_NET=str(tmp_path / "net"))
    link = tmp_path / prog
    if not link.exists():
        link.symlink_to(TOOL)
    return subprocess.run([sys.executable, str(link)] + list(args), env=env, capture_output=True, text=True)


def test_mlnx_qos_starts_out_of_the_box_and_keeps_what_is_set(tmp_path):
    (tmp_path / "net" / "eth1").mkdir(parents=True)
    first = run(tmp_path, "mlnx_qos", "-i", "eth1")
    assert first.returncode == 0
    assert first.stdout == (ROOT / "tests" / "fixtures" /
                            "mlnx_qos_i_pcp_default_524160buf_mlx5_centos12_magnate3.txt").read_text()
    assert parse_mlnx_qos(first.stdout) == {"trust": "pcp", "pfc": [0] * 8, "dcbx": "OS controlled"}
    setit = run(tmp_path, "mlnx_qos", "-i", "eth1", "--trust", "dscp", "--pfc", "0,0,0,1,0,0,0,0")
    assert parse_mlnx_qos(setit.stdout)["trust"] == "dscp"
    again = run(tmp_path, "mlnx_qos", "-i", "eth1")
    assert parse_mlnx_qos(again.stdout) == {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "dcbx": "OS controlled"}
    # the recorded dscp output with PFC on priority 3 comes back byte for byte
    recorded = ROOT / "tests" / "fixtures" / "mlnx_qos_i_dscp_pfc3_buffers_mlx5_ens14f0_magnate3.txt"
    assert again.stdout == recorded.read_text()
    # a reboot (the /run state gone) forgets it, as the NIC does
    for f in (tmp_path / "run").iterdir():
        f.unlink()
    assert parse_mlnx_qos(run(tmp_path, "mlnx_qos", "-i", "eth1").stdout)["trust"] == "pcp"


def test_mlnx_qos_refuses_bad_input(tmp_path):
    (tmp_path / "net" / "eth1").mkdir(parents=True)
    assert run(tmp_path, "mlnx_qos", "-i", "eth9").returncode == 1
    assert run(tmp_path, "mlnx_qos", "-i", "eth1", "--pfc", "1,0").returncode == 2
    assert run(tmp_path, "mlnx_qos", "-i", "eth1", "--trust", "both").returncode == 2
    assert not (tmp_path / "run").exists()


def test_cma_roce_tos_reads_back_what_was_set(tmp_path):
    assert run(tmp_path, "cma_roce_tos", "-d", "mlx5_0").stdout == "0\n"
    # the recorded output of `cma_roce_tos -d mlx5_2 -t 106` is the ToS itself
    assert run(tmp_path, "cma_roce_tos", "-d", "mlx5_0", "-t", "106").stdout == \
        (ROOT / "tests" / "fixtures" / "cma_roce_tos_t106_mlx5_ofed4x_netarbiter.txt").read_text()
    assert run(tmp_path, "cma_roce_tos", "-d", "mlx5_0").stdout == "106\n"
    assert run(tmp_path, "cma_roce_tos", "-d", "mlx5_0", "-t", "300").returncode == 2
