"""The cluster plan, shown before anything runs: what every GPU node will be, computed on the controller.

`plan_report(hosts, hostvars, groups, hardware_profiles, settings)`, the filter roles/plan_report calls once, gives
everything the plan playbook writes and prints: `plan_rows` computes each GPU node's plan from its inventory as every
play computes the variable `node_plan` (`node_plan_of`, filter_plugins/node_plan.py), plus how rdma_roce finds each
rail's netdev and the BMC the cap goes through; `plan_document` is reports/plan.json, `plan_table` the table
(reports/plan.txt).

Nothing here connects to a host, and a row holds names, addresses and numbers only: no secret is read, so none
can be shown. A node whose plan cannot be computed gets a row with its problem (host and variable) instead of
stopping the others; the playbook fails after showing them all.
"""

import importlib.util
import json
import re
import os
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def _sibling(name):
    """<name>.py of this directory, loaded by path under a private name (filter_plugins is not a package)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location("gpulab_filter_%s" % name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_node_plan = _sibling("node_plan")
node_plan_of, RAIL_HOST_OFFSET = _node_plan.node_plan_of, _node_plan.RAIL_HOST_OFFSET
# What a row reads from a host: the node plan's inputs, where the rails' netdevs are found, the addresses shown.
VARIABLES = _node_plan.NODE_PLAN_VARIABLES + ("ansible_host", "bmc_power_address", "bmc_power_node_cap_watts",
                                             "rdma_roce_interface_match", "rdma_roce_rail_interfaces")

RAIL_RULE = ("a node's address on a rail is host number node_index + offset of the rail's subnet (offset: the "
             "rail's `offset` key in rdma_rails, default %d; rdma_rail_addresses overrides one node's address)"
             % RAIL_HOST_OFFSET)


def _plain(value):
    """JSON-ready copy (plain dicts, lists, str, int, float, bool, None) of what hostvars gave."""
    if isinstance(value, Mapping):
        return dict((str(k), _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def _interface(match, interfaces, rail):
    """What rdma_roce's rdma_rail_plan will look for on the node: (interface text, problem or None)."""
    if match == "by_subnet":
        return "by subnet", None
    if match not in ("by_name", "by_mac"):
        return None, "rdma_roce_interface_match=%s is not by_name, by_mac or by_subnet" % (match,)
    wanted = (interfaces or {}).get(rail) if isinstance(interfaces, Mapping) else None
    if not wanted:
        return None, ("rdma_roce_rail_interfaces has no %s for rail %s (rdma_roce_interface_match=%s)"
                      % ("netdev name" if match == "by_name" else "MAC address", rail, match))
    return ("mac %s" % wanted) if match == "by_mac" else str(wanted), None


def host_view(host_vars):
    """The variables a row reads (VARIABLES), each read once from Ansible's hostvars[host] (which renders on every
    access) and made plain: a thousand nodes cost one pass each, not one per rail and key."""
    return dict((name, _plain(host_vars[name])) for name in VARIABLES if name in host_vars)


def plan_row(host, view, groups, hardware_profiles, settings=None):
    """One node's row (see plan_document). view: the host's variables (host_view), plain."""
    s = settings or {}
    row = {"node": host, "management_address": view.get("ansible_host"), "bmc_address": None, "problems": []}
    try:
        plan = node_plan_of(host, view, groups, hardware_profiles, s.get("acceptance_thresholds"))
    except AnsibleFilterError as e:
        text = str(e)
        for prefix in ("node_plan: ", host + ": "):
            text = text[len(prefix):] if text.startswith(prefix) else text
        row.update(rack=None, node_index=view.get("node_index"), profile=view.get("hardware_profile"), rails=[],
                   problems=[text])
        return row
    match = view.get("rdma_roce_interface_match", s.get("interface_match", "by_name"))
    offsets = dict((r.get("name"), r.get("offset", RAIL_HOST_OFFSET)) for r in view.get("rdma_rails") or []
                   if isinstance(r, Mapping))
    overridden = view.get("rdma_rail_addresses") or {}
    rails = []
    for rail in plan["rails"]:
        interface, problem = _interface(match, view.get("rdma_roce_rail_interfaces"), rail["name"])
        if problem and problem not in row["problems"]:
            row["problems"].append(problem)
        rails.append({"name": rail["name"], "interface": interface, "address": rail["address"],
                      "subnet": rail["subnet"], "offset": int(offsets.get(rail["name"], RAIL_HOST_OFFSET)),
                      "mtu": rail["mtu"], "address_from": "rdma_rail_addresses" if rail["name"] in overridden else "rule"})
    power = plan["power"]
    rack = plan["rack"]
    budget = view.get("rack_power_budget_watts") or None
    members = len((groups or {}).get(rack) or []) if rack else 0
    share = (int(budget) // members) if budget and members else None
    explicit = view.get("bmc_power_node_cap_watts") or 0
    row.update({
        "rack": rack or None,
        "node_index": plan["node_index"],
        "profile": plan["profile_name"],
        "gpu_count": plan["gpu_count"],
        "fabric_manager": plan["fabric_manager"],
        "bmc_address": view.get("bmc_power_address") or None,
        "interface_match": match,
        "rails": rails,
        "gpu_limits_watts": dict((str(k), v) for k, v in sorted(power["gpu_limits_watts"].items())),
        "gpu_limit_watts": power["gpu_limit_watts"],
        "gpu_range_watts": {"min": power["gpu_min_watts"], "max": power["gpu_max_watts"]},
        "node_cap_watts": power["node_cap_watts"],
        "node_cap_from": ("bmc_power_node_cap_watts" if int(explicit) > 0
                          else "rack share" if power["node_cap_watts"] else None),
        "rack_budget_watts": int(budget) if budget else None,
        "rack_nodes": members or None,
        "rack_share_watts": share,
        "thermal_c": {"alert": plan["thermal"]["alert_c"], "slowdown": plan["thermal"]["slowdown_c"]},
    })
    if power["node_cap_watts"] and not row["bmc_address"]:
        row["problems"].append("node cap %d W but no bmc_power_address to set it through" % power["node_cap_watts"])
    return row


def _order(row):
    index = row.get("node_index")
    return (not isinstance(index, int) or isinstance(index, bool), index if isinstance(index, int) else 0, row["node"])


def plan_rows(hosts, hostvars, groups, hardware_profiles, settings=None):
    """Rows of every host in `hosts` (the GPU nodes), ordered by node_index. hostvars: Ansible's hostvars (or any
    mapping of host to its variables); a host whose variables cannot be read gets a row with the error."""
    rows = []
    for host in hosts or []:
        try:
            rows.append(plan_row(host, host_view(hostvars[host]), groups, hardware_profiles, settings))
        except Exception as e:  # noqa: BLE001 - a variable that cannot be evaluated is the node's problem
            rows.append({"node": host, "rack": None, "node_index": None, "profile": None, "rails": [],
                         "problems": ["the plan cannot be computed: %s: %s"
                                      % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")]})
    return sorted(rows, key=_order)


def plan_document(rows, cluster=""):
    """reports/plan.json: the cluster, the rail address rule, each rack's budget and share, every node's row."""
    racks = {}
    for row in rows:
        if row.get("rack"):
            racks.setdefault(row["rack"], {"nodes": row.get("rack_nodes"), "budget_watts": row.get("rack_budget_watts"),
                                           "share_watts": row.get("rack_share_watts")})
    return {"cluster": str(cluster or ""), "gpu_nodes": len(rows), "rail_rule": RAIL_RULE,
            "racks": dict(sorted(racks.items())), "problems": sum(len(r.get("problems") or []) for r in rows),
            "nodes": rows}


def plan_problems(rows):
    """"<node>: <problem>" for every problem of every row."""
    return ["%s: %s" % (row["node"], p) for row in rows for p in row.get("problems") or []]


def _watts(value):
    return "-" if value in (None, "", 0) else "%d W" % value


def _gpu_limits(row):
    limits = list((row.get("gpu_limits_watts") or {}).values())
    if not limits:
        return "-"
    if len(set(limits)) == 1:
        return "%d x %d W" % (len(limits), limits[0])
    return "/".join(str(w) for w in limits) + " W"


def plan_table(rows, cluster=""):
    """The plan as an aligned text table: one line per node. Each rail's column shows the node's address on it;
    the netdev is in the column's heading when every node uses the same one, else in the cell."""
    rails = {}  # rail name -> its first row's entry (subnet, offset, MTU), in the order the rails come
    for row in rows:
        for rail in row.get("rails") or []:
            rails.setdefault(rail["name"], rail)
    common = {}
    for name in rails:
        seen = set(r["interface"] for row in rows for r in row.get("rails") or [] if r["name"] == name)
        common[name] = seen.pop() if len(seen) == 1 else None
    head = ["node", "rack", "index", "profile", "FM", "GPU limits", "node cap", "rack budget / nodes = share",
            "alert/slowdown", "BMC"] + ["%s %s" % (n, common[n]) if common[n] else n for n in rails]
    lines = []
    for row in rows:
        if not row.get("gpu_count"):  # no plan: its problem is listed below the table
            lines.append([row["node"], row.get("rack") or "-", str(row.get("node_index", "-")),
                          str(row.get("profile") or "-")] + ["?"] * (6 + len(rails)))
            continue
        cap = _watts(row.get("node_cap_watts"))
        if row.get("node_cap_from") == "bmc_power_node_cap_watts":
            cap += " (set)"
        share = ("%d W / %d = %d W" % (row["rack_budget_watts"], row["rack_nodes"], row["rack_share_watts"])
                 if row.get("rack_share_watts") else "-")
        mine = dict((r["name"], r) for r in row.get("rails") or [])
        cells = []
        for name in rails:
            rail = mine.get(name)
            text = (rail or {}).get("address") or "-"
            cells.append(text if common[name] or rail is None else "%s %s" % (rail["interface"] or "?", text))
        lines.append([row["node"], row.get("rack") or "-", str(row["node_index"]), row["profile"],
                      "yes" if row.get("fabric_manager") else "no", _gpu_limits(row), cap, share,
                      "%s/%s C" % (row["thermal_c"]["alert"], row["thermal_c"]["slowdown"]),
                      row.get("bmc_address") or "-"] + cells)
    widths = [max(len(str(c)) for c in column) for column in zip(head, *lines)]
    out = ["Plan of %s: %d GPU node(s) in %d rack(s), from the inventory alone (no host was contacted)."
           % (cluster or "the cluster", len(rows), len(set(r.get("rack") for r in rows if r.get("rack")))),
           "FM: Fabric Manager runs. node cap: the BMC power cap, the rack's share unless bmc_power_node_cap_watts "
           "sets it (set). alert/slowdown: GPU temperatures.",
           "Rails: " + RAIL_RULE + "."]
    out += ["  %s: %s, offset %d, MTU %s" % (n, r["subnet"], r["offset"], r["mtu"]) for n, r in rails.items()]
    out.append("")
    for cells in [head] + lines:
        out.append("  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip())
    problems = plan_problems(rows)
    if problems:
        out += ["", "%d problem(s):" % len(problems)] + problems
    return "\n".join(out) + "\n"


def plan_report(hosts, hostvars, groups, hardware_profiles, settings=None):
    """Everything the plan playbook writes and prints, computed once: {json (reports/plan.json), table
    (reports/plan.txt, printed), problems ("<node>: <problem>"), nodes (count)}. settings: cluster (its name),
    acceptance_thresholds, interface_match (rdma_roce's default of rdma_roce_interface_match)."""
    s = settings or {}
    rows = plan_rows(hosts, hostvars, groups, hardware_profiles, s)
    document = plan_document(rows, s.get("cluster", ""))
    return {"json": json.dumps(document, indent=2, sort_keys=True) + "\n", "table": plan_table(rows, s.get("cluster", "")),
            "problems": plan_problems(rows), "nodes": len(rows)}


def plan_gpu_alerts(hosts, hostvars, groups, hardware_profiles):
    """[{alert_c, nodes}] by GPU alert temperature, lowest first: each node's threshold from its own plan
    (thermal.alert_c: its profile with the bmc_power_gpu_temperature_c it sees), the very number gpu_health grades
    it with, whichever group sets the override. A node whose plan cannot be computed is left out (preflight names
    it); Prometheus then alerts on it by its profile label or the default."""
    by_alert = {}
    for host in hosts or []:
        try:
            plan = node_plan_of(host, host_view(hostvars[host]), groups, hardware_profiles)
        except (AnsibleFilterError, KeyError):
            continue
        by_alert.setdefault(plan["thermal"]["alert_c"], []).append(host)
    return [{"alert_c": alert, "nodes": sorted(nodes), "node_regex": promql_node_regex(nodes)}
            for alert, nodes in sorted(by_alert.items())]


def promql_node_regex(nodes):
    """The node names as one alternation, ready for a PromQL string: regex metacharacters escaped (a dot of an FQDN
    matches a dot only), each backslash doubled for the string literal."""
    return "|".join(re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\\\1", str(n)) for n in sorted(nodes))


class FilterModule:
    def filters(self):
        return {"plan_report": plan_report, "plan_gpu_alerts": plan_gpu_alerts, "promql_node_regex": promql_node_regex}
