"""RoCE fabric filters: which netdev carries each rail, the ping matrix, and its report.

Every address computation goes through netaddr, and a node's rail address through `rail_address`
(filter_plugins/network.py), so the roles and the lab agree on where a node sits on a rail.
"""

import importlib.util
import os
import re

from ansible.errors import AnsibleFilterError

try:
    import netaddr
except ImportError:  # pragma: no cover - reported when a filter is used
    netaddr = None


def _load_network_filters():
    """network.py sits next to this file; load it by path (filter_plugins is not a package)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "network.py")
    spec = importlib.util.spec_from_file_location("gpulab_filter_network", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_network = _load_network_filters()
rail_address = _network.rail_address
RAIL_HOST_OFFSET = _network.RAIL_HOST_OFFSET

MATCH_MODES = ("by_subnet", "by_name", "by_mac")

# ping's own words for the failures a jumbo-frame path check meets, most specific first.
_PING_ERRORS = (
    (re.compile(r"message too long, mtu=(\d+)", re.I), "local MTU {0} is below the frame size"),
    (re.compile(r"Frag needed and DF set \(mtu = (\d+)\)", re.I), "path MTU {0} on the way (fragmentation needed)"),
    (re.compile(r"Destination Host Unreachable", re.I), "destination host unreachable"),
    (re.compile(r"Network is unreachable", re.I), "network unreachable"),
    (re.compile(r"Cannot assign requested address|bind: ", re.I), "source address is not configured on this node"),
    (re.compile(r"unknown iface|No such device", re.I), "source interface does not exist"),
    (re.compile(r"100% packet loss|0 received", re.I), "no reply within the timeout (frame dropped on the path)"),
)


def _need_netaddr(what):
    if netaddr is None:
        raise AnsibleFilterError("%s: the netaddr Python package is required" % what)


def _net(subnet, what):
    _need_netaddr(what)
    try:
        return netaddr.IPNetwork(str(subnet))
    except (netaddr.AddrFormatError, ValueError, TypeError) as exc:
        raise AnsibleFilterError("%s: %r is not a valid subnet (%s)" % (what, subnet, exc))


def _fact_key(name):
    return str(name).replace("-", "_").replace(".", "_").replace(":", "_")


def _iface_facts(facts, name):
    return facts.get(_fact_key(name)) or facts.get("ansible_" + _fact_key(name)) or {}


def _iface_ipv4(facts, name):
    data = _iface_facts(facts, name)
    found = []
    for entry in [data.get("ipv4")] + list(data.get("ipv4_secondaries") or []):
        if isinstance(entry, dict) and entry.get("address"):
            found.append(entry["address"])
    return found


def _same_mac(a, b):
    try:
        return netaddr.EUI(str(a)) == netaddr.EUI(str(b))
    except (netaddr.AddrFormatError, ValueError, TypeError):
        return False


def _find_interface(rail, facts, match, wanted, what):
    names = [n for n in (facts.get("interfaces") or []) if n != "lo"]
    if match == "by_name":
        if not wanted:
            raise AnsibleFilterError("%s: rail %s has no interface name (set it in the per-host interface map)"
                                     % (what, rail["name"]))
        if wanted not in names:
            raise AnsibleFilterError("%s: rail %s: interface %s does not exist on this node (it has %s)"
                                     % (what, rail["name"], wanted, ", ".join(sorted(names)) or "none"))
        return wanted
    if match == "by_mac":
        if not wanted:
            raise AnsibleFilterError("%s: rail %s has no MAC address (set it in the per-host interface map)"
                                     % (what, rail["name"]))
        hits = [n for n in names if _same_mac(_iface_facts(facts, n).get("macaddress", ""), wanted)]
        if len(hits) != 1:
            raise AnsibleFilterError("%s: rail %s: expected one interface with MAC %s, found %d (%s)"
                                     % (what, rail["name"], wanted, len(hits), ", ".join(hits) or "none"))
        return hits[0]
    net = _net(rail["subnet"], what)
    hits = [n for n in names if any(netaddr.IPAddress(a) in net for a in _iface_ipv4(facts, n))]
    if len(hits) != 1:
        raise AnsibleFilterError("%s: rail %s: expected one interface with an IPv4 address in %s, found %d (%s)"
                                 % (what, rail["name"], net, len(hits), ", ".join(sorted(hits)) or "none"))
    return hits[0]


def rdma_rail_plan(rails, facts, node_index, match="by_subnet", interfaces=None, addresses=None,
                   table_base=100):
    """Resolve every rail on this node.

    rails: [{name, subnet, mtu, offset?}]; facts: the node's ansible_facts (network subset);
    interfaces: {rail name: netdev name (by_name) or MAC (by_mac)}; addresses: {rail name: address}
    overrides. Returns [{name, subnet, mtu, interface, mac, address, prefixlen, address_cidr,
    shares_subnet, table, position}].
    """
    what = "rdma_rail_plan"
    _need_netaddr(what)
    if match not in MATCH_MODES:
        raise AnsibleFilterError("%s: match %r is not one of %s" % (what, match, ", ".join(MATCH_MODES)))
    if not isinstance(rails, list) or not rails:
        raise AnsibleFilterError("%s: expected a non-empty list of rails, got %r" % (what, rails))
    interfaces = interfaces or {}
    addresses = addresses or {}
    nets = [_net(r.get("subnet"), "%s: rail %s" % (what, r.get("name"))) for r in rails]
    plan = []
    for position, (rail, net) in enumerate(zip(rails, nets)):
        iface = _find_interface(rail, facts, match, interfaces.get(rail["name"]), what)
        if rail["name"] in addresses:
            try:
                address = netaddr.IPAddress(str(addresses[rail["name"]]).split("/")[0])
            except (netaddr.AddrFormatError, ValueError) as exc:
                raise AnsibleFilterError("%s: rail %s: address override %r is not an address (%s)"
                                         % (what, rail["name"], addresses[rail["name"]], exc))
            if address not in net:
                raise AnsibleFilterError("%s: rail %s: address override %s is outside %s"
                                         % (what, rail["name"], address, net))
            address = str(address)
        else:
            address = rail_address(str(net), node_index, offset=rail.get("offset", RAIL_HOST_OFFSET))
        shares = any(i != position and (net in other or other in net) for i, other in enumerate(nets))
        plan.append({
            "name": rail["name"],
            "subnet": str(net.cidr),
            "mtu": int(rail["mtu"]),
            "interface": iface,
            "mac": _iface_facts(facts, iface).get("macaddress", ""),
            "current_mtu": _iface_facts(facts, iface).get("mtu"),
            "address": address,
            "offset": int(rail.get("offset", RAIL_HOST_OFFSET)),
            "prefixlen": net.prefixlen,
            "address_cidr": "%s/%d" % (address, net.prefixlen),
            "shares_subnet": shares,
            "table": int(table_base) + position,
            "position": position,
        })
    names = [p["interface"] for p in plan]
    dupes = sorted(set(n for n in names if names.count(n) > 1))
    if dupes:
        raise AnsibleFilterError("%s: interface(s) %s carry more than one rail" % (what, ", ".join(dupes)))
    return plan


def fabric_ping_targets(plan, hostvars, peers, me, addresses_var="rdma_rail_addresses"):
    """One entry per (rail, peer): where this node pings from and to, with the jumbo payload size."""
    targets = []
    for rail in plan:
        for peer in peers:
            if peer == me:
                continue
            peer_vars = hostvars[peer]
            override = (peer_vars.get(addresses_var) or {}).get(rail["name"])
            if override:
                dst = str(netaddr.IPAddress(str(override).split("/")[0]))
            elif peer_vars.get("node_index") is None:
                raise AnsibleFilterError("fabric_ping_targets: %s has no node_index" % peer)
            else:
                dst = rail_address(rail["subnet"], peer_vars["node_index"],
                                   offset=rail.get("offset", RAIL_HOST_OFFSET))
            targets.append({
                "rail": rail["name"], "src": me, "dst": peer,
                "src_if": rail["interface"], "src_addr": rail["address"], "dst_addr": dst,
                "mtu": int(rail["mtu"]),
                # IPv4 header (20) and ICMP header (8) ride inside the MTU.
                "payload": int(rail["mtu"]) - 28,
            })
    return targets


def ping_error(stdout, stderr="", rc=1):
    """A one-line reason for a failed don't-fragment ping."""
    text = "%s\n%s" % (stdout or "", stderr or "")
    for pattern, message in _PING_ERRORS:
        found = pattern.search(text)
        if found:
            return message.format(*found.groups())
    last = [line.strip() for line in text.splitlines() if line.strip()]
    return "ping exited %s: %s" % (rc, last[-1] if last else "no output")


def fabric_report(probe, plan, host=""):
    """Turn the fabric_probe result (pairs_checked, and only the failing targets as results) and the rail plan
    into fabric_verify_report."""
    probe = probe if isinstance(probe, dict) else {}
    results, checked = probe.get("results"), probe.get("pairs_checked")
    if not isinstance(results, list) or not isinstance(checked, int) or checked < len(results):
        raise AnsibleFilterError("fabric_report: expected a fabric_probe result (pairs_checked and the failing "
                                 "results), got pairs_checked %r and results %r" % (checked, results))
    failures = []
    for res in results:
        target = res.get("item") or res.get("_fabric_verify_target") or {}
        if res.get("rc", 1) == 0:
            continue
        failures.append({
            "rail": target.get("rail"), "src": target.get("src"), "dst": target.get("dst"),
            "src_if": target.get("src_if"), "src_addr": target.get("src_addr"),
            "dst_addr": target.get("dst_addr"), "payload": target.get("payload"),
            "error": ping_error(res.get("stdout", ""), res.get("stderr", ""), res.get("rc")),
        })
    interfaces = []
    for rail in plan:
        current = rail.get("current_mtu")
        interfaces.append({
            "rail": rail["name"], "host": host, "interface": rail["interface"], "address": rail["address"],
            "mtu": current, "expected_mtu": rail["mtu"],
            "ok": current is not None and int(current) == int(rail["mtu"]),
        })
    return {
        "pairs_checked": checked,
        "pairs_ok": checked - len(failures),
        "failures": failures,
        "interfaces": interfaces,
        "mtu_mismatches": [i for i in interfaces if not i["ok"]],
        "ok": not failures and all(i["ok"] for i in interfaces),
    }


def fabric_failed_pairs(report):
    """One line per problem of a report: failing pairs, then interfaces at the wrong MTU.

    'rail0 gpu-a1 -> gpu-b2 (198.18.1.11 -> 198.18.1.15): reason'
    'rail0 gpu-b2 eth1 (198.18.1.15): MTU 1500, the rail is 9000'
    """
    report = report or {}
    lines = ["%s %s -> %s (%s -> %s): %s" % (f["rail"], f["src"], f["dst"], f["src_addr"], f["dst_addr"], f["error"])
             for f in report.get("failures", [])]
    lines += ["%s %s %s (%s): MTU %s, the rail is %s" % (i["rail"], i.get("host", ""), i["interface"], i["address"],
                                                          i["mtu"], i["expected_mtu"])
              for i in report.get("mtu_mismatches", [])]
    return lines


def _at_fault(reports):
    """{host: rails it is at fault on}, in O(nodes x rails + failures): its own interface at the wrong MTU, or
    every pair it is part of on a rail failed in both directions (with at least two peers)."""
    hosts = set(reports)
    rails = set(i["rail"] for r in reports.values() for i in (r or {}).get("interfaces", []))
    failed = set()
    for report in reports.values():
        for f in (report or {}).get("failures", []):
            failed.add((f["rail"], f["src"], f["dst"]))
    both_ways = {}  # (rail, host) -> peers whose pairs with host failed in both directions
    for rail, src, dst in failed:
        if src != dst and src in hosts and dst in hosts and rail in rails and (rail, dst, src) in failed:
            both_ways[(rail, src)] = both_ways.get((rail, src), 0) + 1
    peers = len(hosts) - 1
    at_fault = {h: set(i["rail"] for i in (reports[h] or {}).get("mtu_mismatches", [])) for h in hosts}
    for (rail, host), count in both_ways.items():
        if peers >= 2 and count == peers:
            at_fault[host].add(rail)
    return at_fault


def _verdict(reports, at_fault, me):
    mine = reports[me] or {}
    mismatched = set(i["rail"] for i in mine.get("mtu_mismatches", []))
    fail = list(fabric_failed_pairs({"mtu_mismatches": mine.get("mtu_mismatches", [])}))
    fail += ["%s: every full-size ping to and from all %d peers failed" % (rail, len(reports) - 1)
             for rail in sorted(at_fault[me]) if rail not in mismatched]
    warn = []
    for f in mine.get("failures", []):
        line = fabric_failed_pairs({"failures": [f]})[0]
        if f["rail"] in at_fault[me]:
            continue
        if f["rail"] in at_fault.get(f["dst"], ()):
            warn.append("%s (%s is at fault on %s)" % (line, f["dst"], f["rail"]))
        else:
            fail.append(line)
    if fail:
        return {"status": "fail", "reasons": fail + warn}
    return {"status": "warn" if warn else "ok", "reasons": warn}


def _reports(reports, what):
    if not isinstance(reports, dict):
        raise AnsibleFilterError("%s: reports must be a dict of host -> fabric_verify_report" % what)
    return reports


def fabric_verdicts(reports, hosts=None):
    """Every node's fabric status at once: {host: {'status', 'reasons'}}, in O(nodes x rails + failures).

    reports is a dict of host -> fabric_verify_report, or Ansible's hostvars with hosts the play's hosts (the
    reports of those that have one are read once). A failed jumbo ping implicates both ends, so the failures
    are attributed across the cluster: a node is at fault on a rail when its own interface has the wrong MTU,
    or when every pair it is part of on that rail failed in both directions (at least two peers). A node whose
    only failing pairs are with nodes at fault gets a warning naming them; a failing pair that no fault
    explains fails both ends. A host in hosts without a report is 'skip'.
    """
    if hosts is not None:
        found = {}
        for host in hosts:
            report = reports[host].get("fabric_verify_report") if host in reports else None
            if report is not None:
                found[host] = report
        verdicts = fabric_verdicts(found)
        for host in hosts:
            verdicts.setdefault(host, {"status": "skip", "reasons": ["fabric check did not run on %s" % host]})
        return verdicts
    reports = _reports(reports, "fabric_verdicts")
    at_fault = _at_fault(reports)
    return {host: _verdict(reports, at_fault, host) for host in reports}


def fabric_verdict(reports, me):
    """One node's entry of fabric_verdicts (linear in the cluster per call: use fabric_verdicts once per play
    where every node needs its verdict)."""
    reports = _reports(reports, "fabric_verdict")
    if me not in reports:
        return {"status": "skip", "reasons": ["fabric check did not run on %s" % me]}
    return _verdict(reports, _at_fault(reports), me)


class FilterModule(object):
    """RoCE fabric filters."""

    def filters(self):
        return {
            "rdma_rail_plan": rdma_rail_plan,
            "fabric_ping_targets": fabric_ping_targets,
            "fabric_report": fabric_report,
            "fabric_failed_pairs": fabric_failed_pairs,
            "fabric_verdict": fabric_verdict,
            "fabric_verdicts": fabric_verdicts,
        }
