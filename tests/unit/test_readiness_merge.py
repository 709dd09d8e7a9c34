"""readiness_merge: the reports of a sliced job's slices become the one report an unsliced run writes, for
any split of any nodes (hypothesis); a malformed report, another cluster, a node in two slices or not in the
job's inventory refuses the merge, naming it; a node no slice reported is not ready."""
import copy
import os
import sys

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given, settings, strategies as st

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "filter_plugins"))
from readiness import COLUMNS, missing_row, readiness_document, readiness_merge  # noqa: E402


def row(node, reasons=()):
    reasons = list(reasons)
    return {"node": node, "rack": "rack_" + node[4], "profile": "hgx-h100-8gpu", "ready": not reasons,
            "verdict": "NOT READY" if reasons else "ready", "reasons": reasons,
            "columns": {c: {"status": "fail" if reasons and c == "ecc" else "ok", "reasons": reasons if c == "ecc" else []}
                        for c in COLUMNS}}


def slices(rows, count):
    """AWX's split: host i goes to slice i % count; each slice writes its own report."""
    rows = copy.deepcopy(rows)
    return {"share/lab/99/%d/readiness.json" % (100 + i): readiness_document(rows[i::count], "lab")
            for i in range(count) if rows[i::count]}


ROWS = [row("gpu-a1"), row("gpu-a2", ["ecc: gpu 1 uncorrectable 4"]), row("gpu-a3"), row("gpu-b1"),
        row("gpu-b2", ["xid: 79"]), row("gpu-b3")]
EXPECTED = {r["node"]: {"rack": r["rack"], "profile": r["profile"]} for r in ROWS}


def test_four_slices_merge_into_the_unsliced_report():
    merged = readiness_merge(slices(ROWS, 4), "lab", EXPECTED)
    assert merged == readiness_document(ROWS, "lab")
    assert merged["not_ready"] == ["gpu-a2", "gpu-b2"] and len(merged["ready"]) == 4


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 999), st.booleans()), min_size=1, max_size=60,
                unique_by=lambda t: t[0]),
       st.integers(1, 8), st.randoms())
def test_any_split_of_any_nodes_merges_into_the_unsliced_report(nodes, count, rnd):
    rows = [row("gpu-%s%03d" % ("ab"[n % 2], n), ["ecc: bad"] if bad else []) for n, bad in nodes]
    rnd.shuffle(rows)
    expected = {r["node"]: {} for r in rows}
    assert readiness_merge(slices(rows, count), "lab", expected) == readiness_document(rows, "lab")


def test_a_node_no_slice_reported_is_not_ready_with_its_rack():
    parts = slices(ROWS, 3)
    del parts[sorted(parts)[0]]  # the slice of gpu-a1 and gpu-b1 never published
    merged = readiness_merge(parts, "lab", EXPECTED)
    assert merged["not_ready"] == ["gpu-a1", "gpu-a2", "gpu-b1", "gpu-b2"], merged["not_ready"]
    gone = {r["node"]: r for r in merged["nodes"]}["gpu-b1"]
    assert gone == missing_row("gpu-b1", gone["reasons"][0][len("node: "):], "rack_b", "hgx-h100-8gpu")
    assert "no slice reported it" in gone["reasons"][0]


def refusal(reports, expected=EXPECTED, cluster="lab"):
    with pytest.raises(AnsibleFilterError) as e:
        readiness_merge(reports, cluster, expected)
    return str(e.value)


def test_a_node_in_two_slices_is_refused_naming_both():
    parts = slices(ROWS, 2)
    first, second = sorted(parts)
    parts[second] = readiness_document(parts[second]["nodes"] + [row("gpu-a1")], "lab")
    assert refusal(parts) == "readiness_merge: node gpu-a1 is in two slice reports, %s and %s" % (first, second)


def test_another_cluster_or_an_unknown_node_is_refused():
    parts = slices(ROWS, 2)
    assert "is a report of cluster 'lab', not 'prod'" in refusal(parts, cluster="prod")
    assert "reports node gpu-b3, which is not one of the GPU nodes" in \
        refusal(parts, expected={n: {} for n in EXPECTED if n != "gpu-b3"})
    assert "no slice reports" in refusal({})


@pytest.mark.parametrize("mutate, words", [
    (lambda r: r.pop("nodes"), "field nodes is None"),
    (lambda r: r.update(cluster=None), "field cluster is None"),
    (lambda r: r["nodes"].append("gpu-x"), "nodes[3] is 'gpu-x'"),
    (lambda r: r["nodes"][0].pop("ready"), "nodes[0] is"),
    (lambda r: r["nodes"][0].update(ready="yes"), "nodes[0] is"),
    (lambda r: r["nodes"][0].update(ready=False), "says ready=False with reasons []"),
    (lambda r: r["nodes"][2].update(ready=True), "(gpu-b2) says ready=True with reasons"),
    (lambda r: r["nodes"].append(copy.deepcopy(r["nodes"][0])), "a node is listed twice: ['gpu-a1']"),
    (lambda r: r["ready"].pop(), "field ready is"),
    (lambda r: r["not_ready"].append("gpu-a3"), "field not_ready is"),
])
def test_a_malformed_slice_report_is_refused_naming_the_source_and_field(mutate, words):
    parts = slices(ROWS, 2)
    source = sorted(parts)[0]
    mutate(parts[source])
    msg = refusal(parts)
    assert msg.startswith("readiness_merge: %s: " % source) and words in msg, msg


def test_a_report_that_is_not_a_mapping_is_refused():
    assert "the report is a list, not a mapping" in refusal({"x/readiness.json": []})
