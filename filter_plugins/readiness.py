"""Turn the verify modules' results into readiness rows and a printable table.

A row has one status per column (ok, warn, fail, error, missing) with the reasons behind it, and a
verdict: a node is ready when no column failed or errored. Warnings are reported, not gating.
"""

from ansible.errors import AnsibleFilterError

COLUMNS = ("topology", "gpus", "ecc", "xid", "pcie", "rdma", "fabric")
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


def _topology_column(result):
    err = _module_error(result)
    if err:
        return "error", [err]
    if "topology" not in result:
        return "error", [result.get("msg", "nvlink_topology returned no topology")]
    reasons = ["%s %s: expected %s, found %s" % (m.get("item"), m.get("check"), m.get("expected"), m.get("found"))
               for m in result.get("mismatches") or []]
    return ("fail" if reasons else "ok"), reasons


def _gpu_columns(result):
    cols = dict((c, ("ok", [])) for c in ("gpus", "ecc", "xid", "pcie"))
    err = _module_error(result)
    if err or "gpus" not in result:
        msg = err or result.get("msg", "gpu_health returned no GPUs")
        return dict((c, ("error", [msg])) for c in cols)

    def add(column, who, name, check):
        status, reasons = cols[column]
        sev = check.get("severity", "fail")
        if sev != "ok":
            reasons = reasons + ["%s %s: %s" % (who, name, check.get("message", ""))]
        cols[column] = (_worse(status, sev if sev in _RANK else "fail"), reasons)

    for gpu in result["gpus"]:
        for name, check in sorted((gpu.get("checks") or {}).items()):
            add(GPU_CHECK_COLUMN.get(name, "gpus"), "GPU%s" % gpu.get("index"), name, check)
    for name, check in sorted((result.get("node") or {}).items()):
        add(GPU_CHECK_COLUMN.get(name, "gpus"), "node", name, check)
    return cols


def _rdma_column(result):
    err = _module_error(result)
    if err:
        return "error", [err]
    if "ports" not in result:
        return "error", [result.get("msg", "rdma_health returned no ports")]
    reasons = ["%s %s: expected %s, found %s" % (m.get("item"), m.get("check"), m.get("expected"), m.get("found"))
               for m in result.get("mismatches") or []]
    return ("fail" if reasons else "ok"), reasons


def _fabric_column(verdict):
    """fabric_verify's verdict for this node ({'status', 'reasons'}, see fabric_verdict); skip if not run."""
    if verdict is None:
        return "skip", []
    if not isinstance(verdict, dict) or verdict.get("status") not in _RANK:
        return "error", ["fabric verdict unreadable: %r" % (verdict,)]
    return verdict["status"], list(verdict.get("reasons") or [])


def readiness_row(results, node, rack="", profile=""):
    """One node's readiness from {'topology': ..., 'gpu': ..., 'rdma': ..., 'fabric': ...} results.

    'fabric' is optional: fabric_verify's verdict for the node; without it the column is 'skip'.
    """
    if not isinstance(results, dict):
        raise AnsibleFilterError("readiness_row: results for %s must be a dict, got %r" % (node, type(results)))
    columns = {}
    columns["topology"] = _topology_column(results.get("topology"))
    columns.update(_gpu_columns(results.get("gpu")))
    columns["rdma"] = _rdma_column(results.get("rdma"))
    columns["fabric"] = _fabric_column(results.get("fabric"))
    row = {"node": node, "rack": rack, "profile": profile, "columns": {}, "reasons": []}
    for col in COLUMNS:
        status, reasons = columns[col]
        row["columns"][col] = {"status": status, "reasons": reasons}
        row["reasons"].extend("%s: %s" % (col, r) for r in reasons if status in ("fail", "error", "missing"))
    row["ready"] = not row["reasons"]
    row["verdict"] = "ready" if row["ready"] else "NOT READY"
    return row


def missing_row(node, reason, rack="", profile=""):
    """A row for a node that produced no results (unreachable, or failed before verify)."""
    row = {"node": node, "rack": rack, "profile": profile, "ready": False, "verdict": "NOT READY",
           "columns": dict((c, {"status": "missing", "reasons": [reason]}) for c in COLUMNS),
           "reasons": ["node: %s" % reason]}
    return row


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
    return "\n".join(lines)


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


class FilterModule(object):
    """Readiness report filters."""

    def filters(self):
        return {
            "readiness_row": readiness_row,
            "readiness_missing_row": missing_row,
            "readiness_table": readiness_table,
            "readiness_markdown": readiness_markdown,
        }
