"""Turn the verify modules' results into readiness rows and a printable table.

A row has one status per column (ok, warn, fail, error, missing, skip) with the reasons behind it, and a
verdict: a node is ready when no column failed or errored. Warnings are reported, not gating. The
acceptance gates (nccl_bandwidth single- and multi-node, dcgm_diag) also give measured against required
(readiness_gates), shown in the Markdown report.
"""

from ansible.errors import AnsibleFilterError

COLUMNS = ("topology", "gpus", "ecc", "xid", "pcie", "rdma", "fabric", "nccl", "dcgm")
# gpu_health check name -> readiness column; checks not listed land in "gpus".
GPU_CHECK_COLUMN = {
    "ecc": "ecc", "retired_pages": "ecc", "row_remap": "ecc",
    "xid": "xid",
    "pcie": "pcie",
}
_RANK = {"skip": 0, "ok": 0, "warn": 1, "fail": 2, "error": 3, "missing": 3}


def _worse(a, b):
    return a if _RANK[a] >= _RANK[b] else b


def _module_error(result):
    """The message of a module call that failed without producing data, else None."""
    if not isinstance(result, dict):
        return "no result"
    if result.get("skipped"):
        return "skipped"
    if result.get("unreachable"):
        return "unreachable: %s" % result.get("msg", "")
    return None


def _checks(result, module):
    """(checks, None) of a check module's result in the one result format, or (None, (status, reasons))."""
    err = _module_error(result)
    if err:
        return None, ("error", [err])
    checks = result.get("checks")
    if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
        return None, ("error", [result.get("msg", "%s returned no checks" % module)])
    return checks, None


def _label(c):
    return "%s %s: %s" % (c.get("subject"), c.get("name"), c.get("reason"))


def _reduce(checks, label=_label, nothing=None):
    """Worst status and the labelled reasons of every check not ok: the module judged, the report only
    reduces. nothing: the reason of a fail when there is no check at all (else an empty list is ok)."""
    if not checks and nothing:
        return "fail", [nothing]
    status, reasons = "ok", []
    for c in checks:
        st = c.get("status") if c.get("status") in ("ok", "warn", "fail") else "fail"
        status = _worse(status, st)
        if st != "ok":
            reasons.append(label(c))
    return status, reasons


def _module_column(result, module):
    checks, error = _checks(result, module)
    return error or _reduce(checks, nothing="%s checked nothing" % module)


def _gpu_columns(result):
    names = GPU_COLUMNS
    checks, error = _checks(result, "gpu_health")
    if error:
        return dict((c, error) for c in names)
    by_column = dict((c, []) for c in names)
    for c in checks:
        by_column[GPU_CHECK_COLUMN.get(c.get("name"), "gpus")].append(c)
    cols = dict((c, _reduce(by_column[c])) for c in names)
    if not checks:
        cols["gpus"] = _reduce(checks, nothing="gpu_health checked nothing")
    return cols


def _fabric_column(verdict):
    """fabric_verify's verdict for this node ({'status', 'reasons'}, see fabric_verdict); skip if not run."""
    if verdict is None:
        return "skip", []
    if not isinstance(verdict, dict) or verdict.get("status") not in _RANK:
        return "error", ["fabric verdict unreadable: %r" % (verdict,)]
    return verdict["status"], list(verdict.get("reasons") or [])


def _not_run(result):
    """Why a gate did not run (disabled, check mode, skipped by a condition), else None."""
    if result is None:
        return "not run"
    if not isinstance(result, dict):
        return None
    if result.get("skipped_in_check_mode"):
        return "not run in check mode"
    if result.get("skipped"):
        return result.get("skip_reason") or "skipped"
    return None


def _gate_not_usable(gate, result, module):
    """Set gate's status and reasons when the module's result is no measurement (not run, unreadable,
    unreachable) and return True; else leave gate alone and return False."""
    why = _not_run(result)
    if why:
        gate.update(status="skip", reasons=[why] if result is not None else [])
    elif not isinstance(result, dict):
        gate.update(status="error", reasons=["%s result unreadable: %r" % (module, result)])
    elif result.get("unreachable"):
        gate.update(status="error", reasons=["unreachable: %s" % result.get("msg", "")])
    else:
        return False
    return True


def _nccl_gate(result, scope):
    """{'status', 'reasons', 'measured_busbw_gbps', 'required_busbw_gbps', 'metric', ...} of one NCCL run."""
    gate = {"scope": scope, "measured_busbw_gbps": None, "required_busbw_gbps": None, "metric": None}
    if _gate_not_usable(gate, result, "nccl_bandwidth"):
        return gate
    gate.update(measured_busbw_gbps=result.get("measured_busbw_gbps"), required_busbw_gbps=result.get("min_busbw_gbps"),
                metric=result.get("metric"), avg_busbw_gbps=result.get("avg_busbw_gbps"),
                nccl_version=result.get("nccl_version"), weakest=result.get("weakest"), cmd=result.get("cmd"))
    if result.get("hosts"):
        gate["hosts"] = list(result["hosts"])
    if gate["measured_busbw_gbps"] is None:
        # no parsed run: all_reduce_perf missing, crashed or printed something unreadable
        gate.update(status="error", reasons=["%s: %s" % (scope, result.get("msg", "nccl_bandwidth returned no "
                                                                                "measurement"))])
        return gate
    checks, error = _checks(result, "nccl_bandwidth")
    if error:
        gate.update(status=error[0], reasons=["%s: %s" % (scope, r) for r in error[1]])
        return gate
    status, reasons = _reduce(checks, label=lambda c: "%s: %s" % (scope, c.get("reason")))
    gate.update(status=status, reasons=reasons)
    return gate


def _dcgm_gate(result):
    gate = {"level": None, "summary": None, "failed_tests": []}
    if _gate_not_usable(gate, result, "dcgm_diag"):
        return gate
    if "tests" not in result:
        gate.update(status="error", reasons=[result.get("msg", "dcgm_diag returned no tests")])
        return gate
    gate.update(level=result.get("level"), summary=result.get("summary"), dcgm_version=result.get("dcgm_version"),
                cmd=result.get("cmd"))
    checks, error = _checks(result, "dcgm_diag")
    if error:
        gate.update(status=error[0], reasons=error[1])
        return gate
    fail_on = result.get("fail_on") or ["Fail"]
    gate["failed_tests"] = [{"test": c.get("test"), "status": c.get("status"), "cause": c.get("cause"),
                             "gpus": c.get("gpus") or []} for c in result.get("causes") or []
                            if c.get("status") in fail_on]
    gate["status"], gate["reasons"] = _reduce(checks, label=lambda c: "level %s %s" % (gate["level"], c.get("reason")),
                                              nothing="dcgm_diag checked nothing")
    return gate


def readiness_gates(results):
    """The acceptance gates of one node's results: {'nccl': ..., 'nccl_multi_node': ..., 'dcgm': ...}.

    Each NCCL gate has status, reasons, measured_busbw_gbps, required_busbw_gbps (None: no mark), metric;
    the DCGM gate has status, reasons, level, summary and failed_tests. A gate not run is 'skip'.
    """
    if not isinstance(results, dict):
        raise AnsibleFilterError("readiness_gates: results must be a dict, got %r" % type(results))
    return {"nccl": _nccl_gate(results.get("nccl"), "single-node"),
            "nccl_multi_node": _nccl_gate(results.get("nccl_multi_node"), "multi-node"),
            "dcgm": _dcgm_gate(results.get("dcgm"))}


def _gate_column(*gates):
    """Worst status of the gates that ran ('skip' when none ran) and the reasons of those not ok."""
    status, reasons = None, []
    for gate in gates:
        if gate["status"] == "skip":
            continue
        status = gate["status"] if status is None else _worse(status, gate["status"])
        if gate["status"] in ("fail", "error", "warn"):
            reasons += gate["reasons"]
    return status or "skip", reasons


GPU_COLUMNS = ("gpus", "ecc", "xid", "pcie")
_NOT_READY = ("fail", "error", "missing")


def readiness_row(results, node, rack="", profile="", gpu_fail_on=("fail",)):
    """One node's readiness from {'topology': ..., 'gpu': ..., 'rdma': ..., 'fabric': ...} results.

    'fabric' is optional: fabric_verify's verdict for the node; without it the column is 'skip'.
    'nccl', 'nccl_multi_node' and 'dcgm' are optional (nccl_bandwidth / dcgm_diag results): the nccl column
    joins the single- and multi-node runs; a gate not given or not run is 'skip'.
    A column at fail, error or missing makes the node not ready; gpu_fail_on (node_verify_fail_on: warn, fail)
    names the gpu_health statuses that do in the GPU columns (gpus, ecc, xid, pcie), error and missing always.
    """
    if not isinstance(results, dict):
        raise AnsibleFilterError("readiness_row: results for %s must be a dict, got %r" % (node, type(results)))
    if isinstance(gpu_fail_on, str) or not all(s in ("warn", "fail") for s in (gpu_fail_on or ())):
        raise AnsibleFilterError("readiness_row: gpu_fail_on for %s must be a list of warn and fail, got %r"
                                 % (node, gpu_fail_on))
    gpu_not_ready = tuple(gpu_fail_on) + ("error", "missing")
    columns = {}
    columns["topology"] = _module_column(results.get("topology"), "nvlink_topology")
    columns.update(_gpu_columns(results.get("gpu")))
    columns["rdma"] = _module_column(results.get("rdma"), "rdma_health")
    columns["fabric"] = _fabric_column(results.get("fabric"))
    gates = readiness_gates(results)
    columns["nccl"] = _gate_column(gates["nccl"], gates["nccl_multi_node"])
    columns["dcgm"] = _gate_column(gates["dcgm"])
    row = {"node": node, "rack": rack, "profile": profile, "columns": {}, "reasons": [], "gates": gates}
    for col in COLUMNS:
        status, reasons = columns[col]
        row["columns"][col] = {"status": status, "reasons": reasons}
        not_ready = gpu_not_ready if col in GPU_COLUMNS else _NOT_READY
        row["reasons"].extend("%s: %s" % (col, r) for r in reasons if status in not_ready)
    row["ready"] = not row["reasons"]
    row["verdict"] = "ready" if row["ready"] else "NOT READY"
    return row


def missing_row(node, reason, rack="", profile=""):
    """A row for a node that produced no results (unreachable, or failed before verify)."""
    row = {"node": node, "rack": rack, "profile": profile, "ready": False, "verdict": "NOT READY",
           "columns": dict((c, {"status": "missing", "reasons": [reason]}) for c in COLUMNS),
           "reasons": ["node: %s" % reason]}
    return row


def readiness_document(rows, cluster=""):
    """The readiness report (readiness.json): the rows by node name and the names ready and not ready."""
    if not isinstance(rows, list):
        raise AnsibleFilterError("readiness_document: rows must be a list, got %r" % type(rows))
    rows = sorted(rows, key=lambda r: r["node"])
    return {"cluster": cluster, "nodes": rows,
            "ready": [r["node"] for r in rows if r["ready"]],
            "not_ready": [r["node"] for r in rows if not r["ready"]]}


def _report_rows(source, report):
    """The rows of one job's readiness.json, checked whole: any field missing, of the wrong type, or a
    ready/not_ready list that disagrees with the rows refuses the merge, naming the source and field."""
    def bad(what):
        raise AnsibleFilterError("readiness_merge: %s: %s" % (source, what))
    if not isinstance(report, dict):
        bad("the report is a %s, not a mapping" % type(report).__name__)
    for key, kind in (("cluster", str), ("nodes", list), ("ready", list), ("not_ready", list)):
        if not isinstance(report.get(key), kind):
            bad("field %s is %r, expected a %s" % (key, report.get(key), kind.__name__))
    for i, row in enumerate(report["nodes"]):
        if not isinstance(row, dict) or not isinstance(row.get("node"), str) or not row["node"] \
                or not isinstance(row.get("ready"), bool) or not isinstance(row.get("reasons"), list) \
                or not isinstance(row.get("columns"), dict):
            bad("nodes[%d] is %r, expected a row with node, ready, reasons and columns" % (i, row))
        if row["ready"] == bool(row["reasons"]):
            bad("nodes[%d] (%s) says ready=%s with reasons %r" % (i, row["node"], row["ready"], row["reasons"]))
    names = [r["node"] for r in report["nodes"]]
    if len(set(names)) != len(names):
        bad("a node is listed twice: %s" % sorted(n for n in set(names) if names.count(n) > 1))
    for key, want in (("ready", True), ("not_ready", False)):
        rows = sorted(r["node"] for r in report["nodes"] if r["ready"] is want)
        if sorted(report[key]) != rows:
            bad("field %s is %r but the rows say %r" % (key, report[key], rows))
    return report["nodes"]


def readiness_merge(reports, cluster, expected=None):
    """One cluster report from the reports of a sliced job's slices, {source: readiness.json}.

    Refuses (naming it) a report of another cluster, a malformed report, and a node reported by two slices
    or not in expected. expected: {node: {rack, profile}} of the GPU nodes the job covered; a node no slice
    reported is not ready ("no slice reported it"), as an unreachable node is in one run."""
    if not isinstance(reports, dict) or not reports:
        raise AnsibleFilterError("readiness_merge: no slice reports to merge (got %r)" % (reports,))
    seen = {}
    for source in sorted(reports):
        rows = _report_rows(source, reports[source])
        if reports[source]["cluster"] != cluster:
            raise AnsibleFilterError("readiness_merge: %s is a report of cluster %r, not %r"
                                     % (source, reports[source]["cluster"], cluster))
        for row in rows:
            if row["node"] in seen:
                raise AnsibleFilterError("readiness_merge: node %s is in two slice reports, %s and %s"
                                         % (row["node"], seen[row["node"]][0], source))
            if expected is not None and row["node"] not in expected:
                raise AnsibleFilterError("readiness_merge: %s reports node %s, which is not one of the GPU nodes "
                                         "this merge covers" % (source, row["node"]))
            seen[row["node"]] = (source, row)
    rows = [row for _, row in seen.values()]
    for node, where in sorted((expected or {}).items()):
        if node not in seen:
            rows.append(missing_row(node, "no slice reported it (its job failed before the report, or was lost)",
                                    where.get("rack", ""), where.get("profile", "")))
    return readiness_document(rows, cluster)


def readiness_table(rows):
    """Fixed-width text table, one line per node, then the reasons of every node not ready."""
    if not isinstance(rows, list):
        raise AnsibleFilterError("readiness_table: rows must be a list, got %r" % type(rows))
    header = ["NODE", "RACK"] + [c.upper() for c in COLUMNS] + ["VERDICT"]
    body = [[r["node"], r.get("rack", "")] + [r["columns"][c]["status"] for c in COLUMNS] + [r["verdict"]]
            for r in rows]
    widths = [max(len(str(line[i])) for line in [header] + body) for i in range(len(header))]
    fmt = "  ".join("%%-%ds" % w for w in widths)
    lines = [fmt % tuple(header), fmt % tuple("-" * w for w in widths)]
    lines += [fmt % tuple(line) for line in body]
    ready = sum(1 for r in rows if r["ready"])
    lines.append("%d of %d nodes ready" % (ready, len(rows)))
    for r in rows:
        for reason in r["reasons"]:
            lines.append("  %s: %s" % (r["node"], reason))
    for r in rows:
        for reason in _warnings(r):
            lines.append("  %s: (warn) %s" % (r["node"], reason))
    return "\n".join(lines)


def _warnings(row):
    """'<column>: <reason>' of every warning of a row: reported, not gating."""
    return ["%s: %s" % (c, reason) for c in COLUMNS for reason in row["columns"][c]["reasons"]
            if row["columns"][c]["status"] == "warn"]


def _md_escape(text):
    return str(text).replace("|", "\\|")


def readiness_markdown(rows, details, cluster=""):
    """Markdown report: the per-node table, the reasons, then each node's GPU link matrix.

    `details` maps node -> its node_verify_report (for the topology); nodes without one get no matrix.
    """
    if not isinstance(rows, list) or not isinstance(details, dict):
        raise AnsibleFilterError("readiness_markdown: rows must be a list and details a dict")
    ready = sum(1 for r in rows if r["ready"])
    out = ["# Cluster readiness%s" % (": " + cluster if cluster else ""), "",
           "%d of %d nodes ready." % (ready, len(rows)), "",
           "| node | rack | profile | " + " | ".join(COLUMNS) + " | verdict |",
           "|---|---|---|" + "---|" * len(COLUMNS) + "---|"]
    for r in rows:
        cells = [r["node"], r.get("rack", ""), r.get("profile", "")]
        cells += [r["columns"][c]["status"] for c in COLUMNS] + ["**%s**" % r["verdict"]]
        out.append("| " + " | ".join(_md_escape(c) for c in cells) + " |")
    for r in rows:
        if r["reasons"]:
            out += ["", "## %s: not ready" % r["node"], ""]
            out += ["- %s" % _md_escape(reason) for reason in r["reasons"]]
    for r in rows:
        warnings = _warnings(r)
        if warnings:
            out += ["", "## %s: warnings (not gating)" % r["node"], ""]
            out += ["- %s" % _md_escape(reason) for reason in warnings]
    gate_lines = []
    for r in rows:
        gates = r.get("gates") or {}
        for name in ("nccl", "nccl_multi_node"):
            g = gates.get(name)
            if g and g["status"] != "skip":
                measured = "%.2f GB/s" % g["measured_busbw_gbps"] if g["measured_busbw_gbps"] is not None else "-"
                required = "%.2f GB/s" % g["required_busbw_gbps"] if g["required_busbw_gbps"] is not None \
                    else "no mark"
                gate_lines.append([r["node"], "NCCL all-reduce %s (%s)" % (g["scope"], g.get("metric") or "-"),
                                   measured, required, g["status"]])
        g = gates.get("dcgm")
        if g and g["status"] != "skip":
            s = g.get("summary") or {}
            measured = ", ".join("%d %s" % (s[k], k) for k in ("pass", "fail", "warn", "skip") if k in s) or "-"
            gate_lines.append([r["node"], "DCGM diag level %s" % g.get("level"), measured,
                               "no test in %s" % "/".join(["Fail"] + (["Warn"] if any(
                                   t["status"] == "Warn" for t in g["failed_tests"]) else [])), g["status"]])
    if gate_lines:
        out += ["", "## Acceptance gates: measured against required", "",
                "| node | gate | measured | required | status |", "|---|---|---|---|---|"]
        out += ["| " + " | ".join(_md_escape(c) for c in line) + " |" for line in gate_lines]
    for r in rows:
        topo = (details.get(r["node"]) or {}).get("topology") or {}
        gpus = topo.get("gpus") or []
        if not gpus:
            continue
        links = topo.get("links") or {}
        nics = topo.get("nics") or []
        out += ["", "## %s: GPU link matrix" % r["node"], "",
                "| | " + " | ".join(gpus + nics) + " |", "|---|" + "---|" * (len(gpus) + len(nics))]
        for g in gpus:
            cells = ["X" if g == other else links.get(g, {}).get(other, "") for other in gpus + nics]
            out.append("| %s | %s |" % (g, " | ".join(cells)))
    return "\n".join(out) + "\n"


def nccl_multi_node_runs(nodes, subnet, options=None, environment=None):
    """One multi-node all-reduce per hardware profile: the mpirun launcher over the rail addresses.

    nodes: [{'host', 'profile', 'address', 'gpus', 'min_busbw_gbps'}] (the play's GPU nodes, any order).
    Returns [{'profile', 'launch_host', 'hosts', 'np', 'launcher', 'min_busbw_gbps', 'skip_reason'}], sorted by
    profile; 'launcher' is the argv before all_reduce_perf: one rank per GPU (-np nodes x gpus, -H addr:gpus),
    mpirun's own traffic kept on the rail subnet, and each environment entry exported with -x.
    """
    if not isinstance(nodes, list) or not nodes:
        raise AnsibleFilterError("nccl_multi_node_runs: nodes must be a non-empty list, got %r" % (nodes,))
    by_profile = {}
    for node in nodes:
        missing = [k for k in ("host", "profile", "address", "gpus") if not isinstance(node, dict) or not node.get(k)]
        if missing:
            raise AnsibleFilterError("nccl_multi_node_runs: node %r lacks %s" % (node, ", ".join(missing)))
        by_profile.setdefault(node["profile"], []).append(node)
    runs = []
    for profile in sorted(by_profile):
        group = sorted(by_profile[profile], key=lambda n: n["host"])
        gpus = set(int(n["gpus"]) for n in group)
        if len(gpus) != 1:
            raise AnsibleFilterError("nccl_multi_node_runs: profile %s has nodes with different GPU counts %s"
                                     % (profile, sorted(gpus)))
        per_node = gpus.pop()
        marks = set(n.get("min_busbw_gbps") for n in group)
        launcher = ["mpirun", "--allow-run-as-root", "-np", str(per_node * len(group)),
                    "-H", ",".join("%s:%d" % (n["address"], per_node) for n in group),
                    "--map-by", "ppr:%d:node" % per_node,
                    "--mca", "oob_tcp_if_include", str(subnet), "--mca", "btl_tcp_if_include", str(subnet)]
        for key in sorted(environment or {}):
            launcher += ["-x", "%s=%s" % (key, environment[key])]
        launcher += [str(o) for o in (options or [])]
        runs.append({"profile": profile, "launch_host": group[0]["host"], "hosts": [n["host"] for n in group],
                     "np": per_node * len(group), "launcher": launcher,
                     "min_busbw_gbps": marks.pop() if len(marks) == 1 else max(m for m in marks if m is not None),
                     "skip_reason": None if len(group) > 1 else
                     "only node of profile %s in the play: a multi-node run needs two" % profile})
    return runs


class FilterModule(object):
    """Readiness report filters."""

    def filters(self):
        return {
            "readiness_row": readiness_row,
            "readiness_missing_row": missing_row,
            "readiness_table": readiness_table,
            "readiness_document": readiness_document,
            "readiness_merge": readiness_merge,
            "readiness_markdown": readiness_markdown,
            "readiness_gates": readiness_gates,
            "nccl_multi_node_runs": nccl_multi_node_runs,
        }
