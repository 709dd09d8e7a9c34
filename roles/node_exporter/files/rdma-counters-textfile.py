#!/usr/bin/python3 -IS
"""The RoCE NICs' congestion and retransmission counters into the node_exporter textfile collector.

  rdma-counters-textfile.py --root /sys/class/infiniband --out /var/lib/prometheus/node-exporter/rdma_hw_counters.prom \
      [--counter np_ecn_marked_roce_packets --counter np_cnp_sent ...]

Reads <root>/<device>/ports/<port>/hw_counters/<counter> (one decimal integer per file, as the mlx5 driver
exposes them; node_exporter's infiniband collector reads counters/ only) and writes, atomically:
  rdma_hw_counter_total{device,port,counter}   the counter's value
  rdma_hw_counters_up{device,port}             1 when every wanted counter was read, else 0
  rdma_hw_counters_error{device,port,counter,reason} 1 for each counter it could not account for: absent,
                                               unreadable, or not a non-negative integer (the value is named)
With no --counter it reads every file of hw_counters/. A root without devices is one error line (no device).
Python standard library only; exits 0 once the file is written, so a bad NIC never stops the timer.
"""
import argparse
import os
import re
import sys
import tempfile

INTEGER = re.compile(r"^[0-9]+$")


def escape(value):
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def read_port(path, wanted):
    """({counter: value}, [(counter, reason)]) of one port's hw_counters directory."""
    values, errors = {}, []
    directory = os.path.join(path, "hw_counters")
    try:
        present = sorted(os.listdir(directory))
    except OSError as exc:
        return values, [("", "no hw_counters directory (%s)" % (exc.strerror or exc))]
    for counter in wanted or present:
        if counter not in present:
            errors.append((counter, "absent"))
            continue
        try:
            with open(os.path.join(directory, counter), "rb") as handle:
                raw = handle.read(64)
        except OSError as exc:
            errors.append((counter, "unreadable (%s)" % (exc.strerror or exc)))
            continue
        text = raw.decode("ascii", "replace").strip()
        if not INTEGER.match(text):
            errors.append((counter, "not a counter: %s" % ascii(text[:20])))
            continue
        values[counter] = int(text)
    return values, errors


def collect(root, wanted):
    """Prometheus text of every device and port under root."""
    lines = ["# HELP rdma_hw_counter_total RDMA NIC hw_counters (ECN marks, CNPs, retransmissions), per port.",
             "# TYPE rdma_hw_counter_total counter"]
    up, errs = [], []
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        devices = []
    for device in devices:
        ports_dir = os.path.join(root, device, "ports")
        try:
            ports = sorted(os.listdir(ports_dir))
        except OSError:
            ports = []
        if not ports:
            errs.append((device, "", "", "no ports"))
            up.append((device, "", 0))
            continue
        for port in ports:
            values, errors = read_port(os.path.join(ports_dir, port), wanted)
            for counter in sorted(values):
                lines.append('rdma_hw_counter_total{device="%s",port="%s",counter="%s"} %d'
                             % (escape(device), escape(port), escape(counter), values[counter]))
            up.append((device, port, 0 if errors else 1))
            errs += [(device, port, counter, reason) for counter, reason in errors]
    if not devices:
        errs.append(("", "", "", "no RDMA device under %s" % root))
    lines += ["# HELP rdma_hw_counters_up 1 when every wanted hw_counter of the port was read.",
              "# TYPE rdma_hw_counters_up gauge"]
    lines += ['rdma_hw_counters_up{device="%s",port="%s"} %d' % (escape(d), escape(p), v) for d, p, v in up]
    lines += ["# HELP rdma_hw_counters_error A hw_counter that could not be read as a counter, and why.",
              "# TYPE rdma_hw_counters_error gauge"]
    lines += ['rdma_hw_counters_error{device="%s",port="%s",counter="%s",reason="%s"} 1'
              % tuple(escape(x) for x in e) for e in errs]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/sys/class/infiniband")
    parser.add_argument("--out", required=True)
    parser.add_argument("--counter", action="append", default=[])
    args = parser.parse_args(argv)
    text = collect(args.root, args.counter)
    directory = os.path.dirname(os.path.abspath(args.out))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".rdma_hw_counters.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, args.out)  # node_exporter never reads a half-written file
    return 0


if __name__ == "__main__":
    sys.exit(main())
