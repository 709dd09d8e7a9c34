#!/usr/bin/python3
"""gpulab test double of DOCA-OFED's mlnx_qos and cma_roce_tos (package mlnx-tools): not NVIDIA software.

Installed as /usr/bin/mlnx_qos and /usr/bin/cma_roce_tos by the fake mlnx-tools package (tests/apt_repo). It
keeps each NIC port's QoS state under /run/gpulab-nic (a tmpfs: like the NIC, it forgets at reboot, so the
rdma_roce boot unit has something to re-apply) and answers from recorded real outputs
(/usr/share/gpulab-fake/mlnx-tools/*.txt, copied from tests/fixtures with their sources):

  mlnx_qos -i IF [--trust pcp|dscp] [--pfc b0,...,b7]   prints the port's configuration (the recorded output
                                                         of that trust mode with its PFC 'enabled' row set)
  cma_roce_tos -d DEV [-t TOS]                           sets and/or prints the RDMA-CM default ToS

A port starts as a NIC out of the box does in the recordings: trust pcp, PFC off, ToS 0.
"""
import json
import os
import re
import sys

STATE = os.environ.get("GPULAB_NIC_STATE", "/run/gpulab-nic")
DATA = os.environ.get("GPULAB_NIC_DATA", "/usr/share/gpulab-fake/mlnx-tools")
NET = os.environ.get("GPULAB_NIC_NET", "/sys/class/net")
RECORDED = {"pcp": "mlnx_qos_i_pcp_default_524160buf_mlx5_centos12_magnate3.txt",
            "dscp": "mlnx_qos_i_dscp_pfc3_buffers_mlx5_ens14f0_magnate3.txt"}
USAGE = "Usage: mlnx_qos -i <interface> [--trust pcp|dscp] [--pfc <8 comma-separated 0/1>]"


def load(name, default):
    try:
        with open(os.path.join(STATE, name), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return default


def save(name, value):
    os.makedirs(STATE, exist_ok=True)
    tmp = os.path.join(STATE, name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(value, fh)
    os.replace(tmp, os.path.join(STATE, name))


def render(state):
    with open(os.path.join(DATA, RECORDED[state["trust"]]), encoding="utf-8") as fh:
        text = fh.read()
    row = "enabled     " + "   ".join(str(v) for v in state["pfc"]) + "   "
    return re.sub(r"(?m)^(\s*)enabled\s.*$", lambda m: m.group(1) + row, text, count=1)


def mlnx_qos(args):
    opts, i = {}, 0
    while i < len(args):
        if args[i] in ("-i", "--interface", "--trust", "--pfc") and i + 1 < len(args):
            opts["i" if args[i] in ("-i", "--interface") else args[i]] = args[i + 1]
            i += 2
        else:
            print(USAGE, file=sys.stderr)
            return 2
    iface = opts.get("i")
    if not iface:
        print(USAGE, file=sys.stderr)
        return 2
    if not os.path.isdir(os.path.join(NET, iface)):
        print("%s: no such network interface" % iface, file=sys.stderr)
        return 1
    state = load("qos-%s.json" % iface, {"trust": "pcp", "pfc": [0] * 8})
    if "--trust" in opts:
        if opts["--trust"] not in RECORDED:
            print(USAGE, file=sys.stderr)
            return 2
        state["trust"] = opts["--trust"]
    if "--pfc" in opts:
        values = opts["--pfc"].split(",")
        if len(values) != 8 or any(v not in ("0", "1") for v in values):
            print(USAGE, file=sys.stderr)
            return 2
        state["pfc"] = [int(v) for v in values]
    if "--trust" in opts or "--pfc" in opts:
        save("qos-%s.json" % iface, state)
    sys.stdout.write(render(state))
    return 0


def cma_roce_tos(args):
    opts = dict(zip(args[::2], args[1::2]))
    dev = opts.get("-d")
    if not dev or len(args) % 2 or not set(opts) <= {"-d", "-t", "-p"}:
        print("Usage: cma_roce_tos -d <dev> [-p <port>] [-t <tos>]", file=sys.stderr)
        return 2
    name = "tos-%s-%s.json" % (dev, opts.get("-p", "1"))
    if "-t" in opts:
        if not opts["-t"].isdigit() or int(opts["-t"]) > 255:
            print("cma_roce_tos: bad ToS %r" % opts["-t"], file=sys.stderr)
            return 2
        save(name, int(opts["-t"]))
    print(load(name, 0))
    return 0


def main(argv):
    prog = os.path.basename(argv[0])
    if prog == "cma_roce_tos":
        return cma_roce_tos(argv[1:])
    return mlnx_qos(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
