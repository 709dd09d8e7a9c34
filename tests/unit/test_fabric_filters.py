"""filter_plugins/fabric.py: rail plan, ping targets, ping error lines, report."""

import os
import sys

import pytest
from ansible.errors import AnsibleFilterError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "filter_plugins"))

from fabric import (fabric_failed_pairs, fabric_ping_targets, fabric_report, fabric_verdict,  # noqa: E402
                    _verdict, fabric_verdicts, ping_error, rdma_rail_plan)
from hypothesis import given, settings, strategies as st  # noqa: E402

RAILS = [{"name": "rail0", "subnet": "198.19.21.0/24", "mtu": 9000},
         {"name": "rail1", "subnet": "198.19.22.0/24", "mtu": 9000}]
FACTS = {
    "interfaces": ["lo", "eth0", "eth1", "eth2"],
    "eth0": {"ipv4": {"address": "172.17.0.2"}, "macaddress": "02:42:ac:11:00:02", "mtu": 1500},
    "eth1": {"ipv4": {"address": "198.19.22.12"}, "macaddress": "02:42:c6:13:16:0c", "mtu": 9000},
    "eth2": {"ipv4": {"address": "198.19.21.12"}, "macaddress": "02:42:c6:13:15:0c", "mtu": 1500},
}


def test_plan_by_subnet_finds_docker_order():
    plan = rdma_rail_plan(RAILS, FACTS, 1, match="by_subnet")
    assert [(p["name"], p["interface"], p["address_cidr"], p["table"]) for p in plan] == [
        ("rail0", "eth2", "198.19.21.12/24", 100), ("rail1", "eth1", "198.19.22.12/24", 101)]
    assert plan[0]["current_mtu"] == 1500
    assert not any(p["shares_subnet"] for p in plan)


def test_plan_by_name_by_mac_and_override():
    plan = rdma_rail_plan(RAILS, FACTS, 0, match="by_mac",
                          interfaces={"rail0": "02:42:C6:13:15:0C", "rail1": "02-42-c6-13-16-0c"},
                          addresses={"rail1": "198.19.22.50"})
    assert [p["interface"] for p in plan] == ["eth2", "eth1"]
    assert plan[0]["address"] == "198.19.21.11" and plan[1]["address"] == "198.19.22.50"
    assert rdma_rail_plan(RAILS, FACTS, 0, match="by_name",
                          interfaces={"rail0": "eth1", "rail1": "eth2"})[0]["interface"] == "eth1"


def test_plan_shared_subnet():
    rails = [{"name": "a", "subnet": "10.0.0.0/24", "mtu": 9000},
             {"name": "b", "subnet": "10.0.0.0/24", "mtu": 9000, "offset": 111}]
    facts = {"interfaces": ["x", "y"], "x": {}, "y": {}}
    plan = rdma_rail_plan(rails, facts, 2, match="by_name", interfaces={"a": "x", "b": "y"})
    assert [p["address"] for p in plan] == ["10.0.0.13", "10.0.0.113"]
    assert all(p["shares_subnet"] for p in plan)


@pytest.mark.parametrize("kwargs,message", [
    ({"match": "by_name"}, "has no interface name"),
    ({"match": "by_name", "interfaces": {"rail0": "ens9", "rail1": "eth1"}}, "ens9 does not exist"),
    ({"match": "by_name", "interfaces": {"rail0": "eth1", "rail1": "eth1"}}, "carry more than one rail"),
    ({"match": "by_subnet", "addresses": {"rail0": "198.19.99.1"}}, "is outside 198.19.21.0/24"),
    ({"match": "by_wire"}, "is not one of"),
])
def test_plan_errors(kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message):
        rdma_rail_plan(RAILS, FACTS, 1, **kwargs)


def test_plan_by_subnet_without_address():
    facts = dict(FACTS, eth2={"mtu": 9000})
    with pytest.raises(AnsibleFilterError, match="rail rail0: expected one interface .* found 0"):
        rdma_rail_plan(RAILS, facts, 1)


def test_targets_and_report():
    plan = rdma_rail_plan(RAILS, FACTS, 1)
    hostvars = {"n0": {"node_index": 0}, "n1": {"node_index": 1}, "n2": {"node_index": 2,
                                                               "rdma_rail_addresses": {"rail0": "198.19.21.99"}}}
    targets = fabric_ping_targets(plan, hostvars, ["n0", "n1", "n2"], "n1")
    assert [(t["rail"], t["dst"], t["dst_addr"], t["payload"]) for t in targets][:2] == [
        ("rail0", "n0", "198.19.21.11", 8972), ("rail0", "n2", "198.19.21.99", 8972)]
    failing = [{"item": t, "rc": 1, "stdout": "", "stderr": "ping: local error: message too long, mtu=1500"}
               for t in targets if t["rail"] == "rail0"]
    report = fabric_report({"pairs_checked": len(targets), "pairs_ok": 2, "results": failing}, plan, "n1")
    assert report["pairs_checked"] == 4 and report["pairs_ok"] == 2 and not report["ok"]
    assert report["failures"][0]["error"] == "local MTU 1500 is below the frame size"
    assert [m["interface"] for m in report["mtu_mismatches"]] == ["eth2"]
    lines = fabric_failed_pairs(report)
    assert lines[0] == "rail0 n1 -> n0 (198.19.21.12 -> 198.19.21.11): local MTU 1500 is below the frame size"
    assert lines[-1] == "rail0 n1 eth2 (198.19.21.12): MTU 1500, the rail is 9000"


@pytest.mark.parametrize("probe", [None, [], {"results": []}, {"pairs_checked": 1, "results": [{}, {}]},
                                   {"pairs_checked": "4", "results": []}])
def test_report_refuses_what_is_not_a_probe_result(probe):
    with pytest.raises(AnsibleFilterError, match="expected a fabric_probe result"):
        fabric_report(probe, rdma_rail_plan(RAILS, FACTS, 1), "n1")


@pytest.mark.parametrize("stdout,stderr,expected", [
    ("1 packets transmitted, 0 received, 100% packet loss, time 0ms", "", "no reply"),
    ("From 198.19.21.1 icmp_seq=1 Frag needed and DF set (mtu = 1500)", "", "path MTU 1500"),
    ("From 198.19.21.12 icmp_seq=1 Destination Host Unreachable", "", "unreachable"),
    ("", "ping: bind: Cannot assign requested address", "source address"),
    ("", "odd", "ping exited 2: odd"),
])
def test_ping_error(stdout, stderr, expected):
    assert expected in ping_error(stdout, stderr, 2)


def _report(host, failures=(), mtu_rails=()):
    """A fabric_verify_report with the given failing (rail, dst) pairs and rails at the wrong MTU."""
    interfaces = [{"rail": r, "host": host, "interface": "eth1", "address": "a", "mtu": 1500 if r in mtu_rails else 9000,
                   "expected_mtu": 9000, "ok": r not in mtu_rails} for r in ("rail0", "rail1")]
    return {"failures": [{"rail": r, "src": host, "dst": d, "src_addr": "s", "dst_addr": "d", "error": "e"}
                         for r, d in failures],
            "interfaces": interfaces, "mtu_mismatches": [i for i in interfaces if not i["ok"]],
            "ok": not failures and not mtu_rails}


def test_verdict_blames_the_node_every_pair_of_which_fails():
    # n2's rail0 port drops jumbo frames (a switch port at 1500): every pair with n2 on rail0 fails.
    reports = {"n1": _report("n1", [("rail0", "n2")]),
               "n2": _report("n2", [("rail0", "n1"), ("rail0", "n3")]),
               "n3": _report("n3", [("rail0", "n2")])}
    assert fabric_verdict(reports, "n2") == {
        "status": "fail", "reasons": ["rail0: every full-size ping to and from all 2 peers failed"]}
    n1 = fabric_verdict(reports, "n1")
    assert n1["status"] == "warn" and n1["reasons"] == ["rail0 n1 -> n2 (s -> d): e (n2 is at fault on rail0)"]


def test_verdict_names_a_wrong_interface_mtu_and_unexplained_pairs():
    reports = {"n1": _report("n1", [("rail1", "n3")]), "n2": _report("n2", mtu_rails=["rail1"]),
               "n3": _report("n3")}
    assert fabric_verdict(reports, "n2") == {
        "status": "fail", "reasons": ["rail1 n2 eth1 (a): MTU 1500, the rail is 9000"]}
    assert fabric_verdict(reports, "n1") == {"status": "fail", "reasons": ["rail1 n1 -> n3 (s -> d): e"]}
    assert fabric_verdict(reports, "n3") == {"status": "ok", "reasons": []}
    assert fabric_verdict(reports, "n9")["status"] == "skip"
    with pytest.raises(AnsibleFilterError, match="reports must be a dict"):
        fabric_verdict([], "n1")


def _quadratic_verdict(reports, me):
    """The attribution as first written (every host against every peer on every rail, per node): the
    reference the linear at-fault search of fabric_verdicts must agree with."""
    if me not in reports:
        return {"status": "skip", "reasons": ["fabric check did not run on %s" % me]}
    failed = set((f["rail"], f["src"], f["dst"]) for r in reports.values() for f in r.get("failures", []))
    hosts = sorted(reports)
    rails = sorted(set(i["rail"] for r in reports.values() for i in r.get("interfaces", [])))
    at_fault = {}
    for host in hosts:
        bad = set(i["rail"] for i in reports[host].get("mtu_mismatches", []))
        peers = [p for p in hosts if p != host]
        for rail in rails:
            if len(peers) >= 2 and all((rail, host, p) in failed and (rail, p, host) in failed for p in peers):
                bad.add(rail)
        at_fault[host] = bad
    return _verdict(reports, at_fault, me)  # only the attribution changed; the verdict's wording is shared


@st.composite
def _clusters(draw):
    """2 to 6 nodes, each with some failing pairs (biased towards one broken node) and wrong-MTU rails."""
    hosts = ["n%d" % i for i in range(draw(st.integers(2, 6)))]
    broken = draw(st.sampled_from(hosts + [None]))
    reports = {}
    for host in hosts:
        pairs = set(draw(st.lists(st.tuples(st.sampled_from(["rail0", "rail1"]), st.sampled_from(hosts)),
                                  max_size=6)))
        if broken and draw(st.booleans()):
            pairs |= set(("rail0", p) for p in hosts if p != host and (host == broken or p == broken))
        mtu = draw(st.lists(st.sampled_from(["rail0", "rail1"]), max_size=1))
        reports[host] = _report(host, sorted(p for p in pairs if p[1] != host), mtu)
    return reports


@settings(max_examples=300, deadline=None)
@given(_clusters())
def test_linear_attribution_agrees_with_the_pairwise_one(reports):
    verdicts = fabric_verdicts(reports)
    assert verdicts == {h: _quadratic_verdict(reports, h) for h in reports}
    assert all(fabric_verdict(reports, h) == verdicts[h] for h in reports)


def test_verdicts_read_the_play_hosts_reports_from_hostvars_once():
    """In a play: fabric_verdicts(hostvars, ansible_play_hosts); a host without a report is skip."""
    hostvars = {"n1": {"fabric_verify_report": _report("n1", [("rail0", "n2")])},
                "n2": {"fabric_verify_report": _report("n2", [("rail0", "n1"), ("rail0", "n3")])},
                "n3": {"fabric_verify_report": _report("n3", [("rail0", "n2")])},
                "n4": {}}
    verdicts = fabric_verdicts(hostvars, ["n1", "n2", "n3", "n4"])
    assert verdicts["n2"]["status"] == "fail" and verdicts["n1"]["status"] == "warn"
    assert verdicts["n4"] == {"status": "skip", "reasons": ["fabric check did not run on n4"]}
    with pytest.raises(AnsibleFilterError, match="fabric_verdicts: reports must be a dict"):
        fabric_verdicts([])
