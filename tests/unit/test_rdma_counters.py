# -*- coding: utf-8 -*-
"""roles/node_exporter/files/rdma-counters-textfile.py: the RoCE NICs' hw_counters as Prometheus text.

Trees are built from the real recordings (`show_counters` prints every file of a port's hw_counters/, and the
`ls -l` recording lists the directory itself) the way the lab simulator builds them; the collector must export
exactly the recorded values for the counters it is asked for, and fail closed, naming the counter and value,
on whatever else a NIC directory may hold: absent counters, empty or non-numeric files, negative numbers, a
directory in place of a file, no hw_counters at all, no device. Mutated file contents never crash it and never
become a value they are not."""

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, ROOT

COLLECTOR = Path(ROOT) / "roles" / "node_exporter" / "files" / "rdma-counters-textfile.py"
GEN = Path(ROOT) / "lab" / "simulator" / "gen_infiniband.py"
collector = runpy.run_path(str(COLLECTOR))
sim = runpy.run_path(str(GEN))
DEFAULTS = yaml.safe_load((Path(ROOT) / "roles" / "node_exporter" / "defaults" / "main.yml").read_text())
WANTED = DEFAULTS["node_exporter_rdma_counters"]
RECORDINGS = sorted(p.name for p in Path(FIXTURES).glob("show_counters_hw_counters_*.txt"))
SAMPLE = re.compile(r'^(rdma_hw_counter_total|rdma_hw_counters_up|rdma_hw_counters_error)\{(.*)\} (\d+)$')


def samples(text):
    """[(metric, {label: value}, value)] of every sample line; fails on any line that is not one."""
    out = []
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        match = SAMPLE.match(line)
        assert match, "not a sample line: %r" % line
        labels = {k: re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), v)
                  for k, v in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2))}
        out.append((match.group(1), labels, int(match.group(3))))
    return out


def tree(tmp_path, counters_by_device):
    root = tmp_path / "infiniband"
    for device, counters in counters_by_device.items():
        hw = root / device / "ports" / "1" / "hw_counters"
        hw.mkdir(parents=True)
        for name, content in counters.items():
            (hw / name).write_bytes(content if isinstance(content, bytes) else (content + "\n").encode())
    return root


@pytest.mark.parametrize("recording", RECORDINGS)
def test_recorded_counters_are_exported_as_recorded(tmp_path, recording):
    recorded = sim["recorded_hw_counters"](recording)
    root = tree(tmp_path, {"mlx5_0": recorded})
    got = samples(collector["collect"](str(root), WANTED))
    values = {labels["counter"]: v for m, labels, v in got if m == "rdma_hw_counter_total"}
    assert values == {name: int(recorded[name]) for name in WANTED}
    assert [(m, labels, v) for m, labels, v in got if m != "rdma_hw_counter_total"] == \
        [("rdma_hw_counters_up", {"device": "mlx5_0", "port": "1"}, 1)]
    # and with no list, every file of the directory
    every = samples(collector["collect"](str(root), []))
    assert {labels["counter"] for m, labels, v in every if m == "rdma_hw_counter_total"} == set(recorded)


def test_the_simulated_tree_has_the_recorded_directory(tmp_path):
    """gen_infiniband's hw_counters/ holds the files `ls -l` lists on the recorded mlx5_bond_0, values from its
    show_counters, and the ECN/CNP counts a congested fabric shows."""
    root = tmp_path / "sys" / "class" / "infiniband"
    net = tmp_path / "net"
    (net / "eth1").mkdir(parents=True)
    (net / "eth1" / "address").write_text("02:42:c6:12:01:0b\n")
    out = subprocess.run([sys.executable, str(GEN), "--root", str(root), "--net-root", str(net),
                          "--faults", str(tmp_path / "none.json"), "eth1=198.18.1.11"],
                         capture_output=True, text=True, check=True).stdout
    assert '"changed": true' in out
    listed = [line.split()[-1] for line in (Path(FIXTURES) / "ls_l_hw_counters_dir_mlx5_bond_0_obsidiannotes.txt")
              .read_text().splitlines() if line.startswith("-")]
    assert sorted(os.listdir(root / "mlx5_0" / "ports" / "1" / "hw_counters")) == sorted(listed)
    got = {labels["counter"]: v for m, labels, v in samples(collector["collect"](str(root), WANTED))
           if m == "rdma_hw_counter_total"}
    assert got["np_ecn_marked_roce_packets"] == 21278189006 and got["np_cnp_sent"] == 1052612505


@pytest.mark.parametrize("content,reason", [
    ("N/A", "not a counter: 'N/A'"),
    ("", "not a counter: ''"),
    ("-1", "not a counter: '-1'"),
    ("12 34", "not a counter: '12 34'"),
    (b"\xff\xfe7", "not a counter: '\\ufffd\\ufffd7'"),
], ids=["na", "empty", "negative", "two-numbers", "bytes"])
def test_a_counter_that_is_not_a_counter_fails_closed(tmp_path, content, reason):
    root = tree(tmp_path, {"mlx5_0": {"np_cnp_sent": content, "np_ecn_marked_roce_packets": "5"}})
    got = samples(collector["collect"](str(root), ["np_cnp_sent", "np_ecn_marked_roce_packets"]))
    assert ("rdma_hw_counters_up", {"device": "mlx5_0", "port": "1"}, 0) in got
    errors = [labels for m, labels, v in got if m == "rdma_hw_counters_error"]
    assert [(e["counter"], e["reason"]) for e in errors] == [("np_cnp_sent", reason)]
    assert [(labels["counter"], v) for m, labels, v in got if m == "rdma_hw_counter_total"] == \
        [("np_ecn_marked_roce_packets", 5)]


def test_absent_unreadable_and_missing_directories_are_named(tmp_path):
    root = tree(tmp_path, {"mlx5_0": {"np_cnp_sent": "1"}, "mlx5_1": {"np_cnp_sent": "2"}})
    (root / "mlx5_1" / "ports" / "1" / "hw_counters" / "out_of_sequence").mkdir()  # not a file
    (root / "mlx5_2" / "ports" / "1").mkdir(parents=True)  # no hw_counters/
    (root / "mlx5_3").mkdir()  # no ports
    got = samples(collector["collect"](str(root), ["np_cnp_sent", "out_of_sequence"]))
    up = {(labels["device"], labels["port"]): v for m, labels, v in got if m == "rdma_hw_counters_up"}
    assert up == {("mlx5_0", "1"): 0, ("mlx5_1", "1"): 0, ("mlx5_2", "1"): 0, ("mlx5_3", ""): 0}
    errors = {(e["device"], e["counter"]): e["reason"] for m, e, v in got if m == "rdma_hw_counters_error"}
    assert errors[("mlx5_0", "out_of_sequence")] == "absent"
    assert errors[("mlx5_1", "out_of_sequence")].startswith("unreadable (Is a directory")
    assert errors[("mlx5_2", "")].startswith("no hw_counters directory")
    assert errors[("mlx5_3", "")] == "no ports"
    none = samples(collector["collect"](str(tmp_path / "absent"), WANTED))
    assert [(m, labels["reason"]) for m, labels, v in none if m == "rdma_hw_counters_error"] == \
        [("rdma_hw_counters_error", "no RDMA device under %s" % (tmp_path / "absent"))]


def test_the_file_is_written_whole_and_readable(tmp_path):
    root = tree(tmp_path, {"mlx5_0": {name: "7" for name in WANTED}})
    out = tmp_path / "textfile" / "rdma_hw_counters.prom"
    out.parent.mkdir()
    argv = ["--root", str(root), "--out", str(out)] + [a for c in WANTED for a in ("--counter", c)]
    assert subprocess.run([sys.executable, str(COLLECTOR)] + argv, check=True).returncode == 0
    assert os.listdir(out.parent) == ["rdma_hw_counters.prom"] and oct(out.stat().st_mode & 0o777) == "0o644"
    assert len([s for s in samples(out.read_text()) if s[0] == "rdma_hw_counter_total"]) == len(WANTED)


@settings(max_examples=200)
@given(st.lists(st.binary(max_size=24), min_size=1, max_size=4))
def test_mutated_counter_files_never_crash_and_never_invent_a_value(tmp_path_factory, contents):
    tmp = tmp_path_factory.mktemp("mut")
    names = ["c%d" % i for i in range(len(contents))]
    root = tree(tmp, {"mlx5_0": dict(zip(names, contents))})
    got = samples(collector["collect"](str(root), names))
    values = {labels["counter"]: v for m, labels, v in got if m == "rdma_hw_counter_total"}
    errors = {labels["counter"] for m, labels, v in got if m == "rdma_hw_counters_error"}
    for name, raw in zip(names, contents):
        text = raw[:64].decode("ascii", "replace").strip()
        if re.fullmatch(r"[0-9]+", text):
            assert values[name] == int(text) and name not in errors
        else:
            assert name not in values and name in errors
    up = [v for m, labels, v in got if m == "rdma_hw_counters_up"]
    assert up == [0 if errors else 1]
