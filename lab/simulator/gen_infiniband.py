#!/usr/bin/python3 -IS
"""LAB ONLY: build a simulated /sys/class/infiniband tree, one RoCE device per rail netdev.

  gen_infiniband.py --config /etc/gpusim/rails.json      (written by playbooks/lab/simulator.yml)
  gen_infiniband.py --root DIR --rate "400 Gb/sec (4X NDR)" eth1=198.18.1.10 eth2=198.18.2.10

Device mlx5_<i> is the i-th rail netdev. Per device, ports/1/ holds state, phys_state, rate,
link_layer, hw_counters/<counter> (a recorded show_counters output, HW_COUNTERS), gids/0..3, gid_attrs/types/0..3, gid_attrs/ndevs/0..3 (GID layout of
tests/fixtures/show_gids_roce_1port_v1v2_ipv4_husky.txt: link-local v1, v2, IPv4-mapped v1, v2),
and device/net/<netdev>/ marks the netdev; tc/1/traffic_class starts empty. Beside it, <root>/../net/<netdev>/
holds device/infiniband/<dev>/ and ecn/roce_{np,rp}/enable/0..7 (created "0" once, then left to rdma_roce). The link-local GID is the EUI-64 of the netdev's real
MAC (read from <net_root>/<netdev>/address). `rdma_port_down` faults from the faults file set
state "1: DOWN" / phys_state "3: Disabled". Idempotent: files are written only when their content
differs; prints {"changed": true|false}. MTU is not simulated (read the real /sys/class/net).
"""
import ipaddress
import json
import os
import shutil
import sys

ACTIVE = ("4: ACTIVE", "5: LinkUp")
DOWN = ("1: DOWN", "3: Disabled")
TYPES = ["IB/RoCE v1", "RoCE v2", "IB/RoCE v1", "RoCE v2"]
# Each device's ports/1/hw_counters/ replays a recorded `show_counters` (one file per counter, as the mlx5 driver
# exposes them): device i takes recording i modulo their number (tests/fixtures/SOURCES.md).
HW_COUNTERS = ["show_counters_hw_counters_mlx5_bond_0_ecn_cnp_nonzero_obsidiannotes.txt",
               "show_counters_hw_counters_mlx5_1_icrc_oos_magnate3.txt"]
HERE = os.path.dirname(os.path.abspath(__file__))


def fixtures_dir():
    """The recordings: fixtures/ of the simulator's bundle on a node, tests/fixtures in the repository."""
    bundled = os.path.join(HERE, "fixtures")
    return bundled if os.path.isdir(bundled) else os.path.join(HERE, "..", "..", "tests", "fixtures")


def recorded_hw_counters(name):
    """{counter: value} of a `show_counters` recording ("Port 1 hw counters:" then "name: value" lines)."""
    counters = {}
    with open(os.path.join(fixtures_dir(), name), encoding="utf-8") as handle:
        for line in handle:
            key, sep, value = line.strip().partition(": ")
            if sep and value.isdigit():
                counters[key] = value
    if not counters:
        raise SystemExit("gen_infiniband: no counters in %s" % name)
    return counters


def link_local_gid(mac):
    octets = [int(x, 16) for x in mac.split(":")]
    octets[0] ^= 0x02
    eui = octets[:3] + [0xFF, 0xFE] + octets[3:]
    groups = ["%02x%02x" % (eui[i], eui[i + 1]) for i in range(0, 8, 2)]
    return "fe80:0000:0000:0000:" + ":".join(groups)


def ipv4_gid(address):
    packed = ipaddress.IPv4Address(address).packed
    return "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" % tuple(packed)


def write(path, content, changed):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == content:
                return changed
    except FileNotFoundError:
        pass
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(content)
    return True


def create(path, content, changed):
    """Write `content` only when the file does not exist yet (state someone else then changes)."""
    if os.path.exists(path):
        return changed
    return write(path, content, True)


def build(root, rails, rate, net_root, faults):
    down = set()
    entries = faults.get("rdma_port_down", [])
    for entry in entries if isinstance(entries, list) else [entries]:
        down.add((entry["device"], int(entry.get("port", 1))))
    changed = False
    wanted, wanted_net = set(), set()
    for i, (netdev, address) in enumerate(rails):
        dev = "mlx5_%d" % i
        wanted.add(dev)
        base = os.path.join(root, dev)
        try:
            with open(os.path.join(net_root, netdev, "address"), encoding="utf-8") as handle:
                mac = handle.read().strip()
        except FileNotFoundError:
            mac = "00:00:00:00:00:00"
        port = os.path.join(base, "ports", "1")
        state, phys = DOWN if (dev, 1) in down else ACTIVE
        changed = write(os.path.join(port, "state"), state + "\n", changed)
        changed = write(os.path.join(port, "phys_state"), phys + "\n", changed)
        changed = write(os.path.join(port, "rate"), rate + "\n", changed)
        changed = write(os.path.join(port, "link_layer"), "Ethernet\n", changed)
        for counter, value in recorded_hw_counters(HW_COUNTERS[i % len(HW_COUNTERS)]).items():
            changed = write(os.path.join(port, "hw_counters", counter), value + "\n", changed)
        gids = [link_local_gid(mac)] * 2 + [ipv4_gid(address)] * 2
        for n in range(4):
            changed = write(os.path.join(port, "gids", str(n)), gids[n] + "\n", changed)
            changed = write(os.path.join(port, "gid_attrs", "types", str(n)), TYPES[n] + "\n", changed)
            changed = write(os.path.join(port, "gid_attrs", "ndevs", str(n)), netdev + "\n", changed)
        marker = os.path.join(base, "device", "net", netdev)
        if not os.path.isdir(marker):
            os.makedirs(marker)
            changed = True
        for other in os.listdir(os.path.join(base, "device", "net")):
            if other != netdev:
                shutil.rmtree(os.path.join(base, "device", "net", other))
                changed = True
        # The NIC's settable state, created once and then left to whoever sets it (rdma_roce's QoS script):
        # RoCE traffic class (empty until set, as recorded in tests/fixtures/sysfs_tc1_traffic_class_unset_*),
        # and beside it a net tree with the device link and the ECN switches (lab choice: off until set).
        changed = create(os.path.join(base, "tc", "1", "traffic_class"), "", changed)
        sim_net = os.path.join(os.path.dirname(root), "net", netdev)
        wanted_net.add(netdev)
        link = os.path.join(sim_net, "device", "infiniband", dev)
        if not os.path.isdir(link):
            os.makedirs(link)
            changed = True
        for point in ("roce_np", "roce_rp"):
            for prio in range(8):
                changed = create(os.path.join(sim_net, "ecn", point, "enable", str(prio)), "0\n", changed)
    net_dir = os.path.join(os.path.dirname(root), "net")
    if os.path.isdir(net_dir):
        for other in os.listdir(net_dir):
            if other not in wanted_net:
                shutil.rmtree(os.path.join(net_dir, other))
                changed = True
    if os.path.isdir(root):
        for dev in os.listdir(root):
            if dev not in wanted:
                shutil.rmtree(os.path.join(root, dev))
                changed = True
    return changed


def main(argv):
    opts = {"root": "/opt/gpusim/sys/class/infiniband", "rate": "400 Gb/sec (4X NDR)",
            "net_root": "/sys/class/net", "faults": os.environ.get("GPUSIM_FAULTS", "/etc/gpusim/faults.json")}
    rails, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--root", "--rate", "--net-root", "--faults", "--config"):
            opts[arg[2:].replace("-", "_")] = argv[i + 1]
            i += 2
            continue
        netdev, _, address = arg.partition("=")
        rails.append((netdev, address))
        i += 1
    if "config" in opts:
        with open(opts["config"], encoding="utf-8") as handle:
            config = json.load(handle)
        opts["root"] = config.get("root", opts["root"])
        opts["rate"] = config.get("rate", opts["rate"])
        rails = [(r["netdev"], r["address"]) for r in config["rails"]]
    try:
        with open(opts["faults"], encoding="utf-8") as handle:
            faults = json.loads(handle.read() or "{}") or {}
    except FileNotFoundError:
        faults = {}
    changed = build(opts["root"], rails, opts["rate"], opts["net_root"], faults)
    print(json.dumps({"changed": changed}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
