#!/usr/bin/env python3
"""Where the time of a `make test` went: every stage (Molecule scenarios included) against the CI budget,
each integration test, the slowest tasks of every playbook run (callback_plugins/task_timings.py), and last,
for each failed stage, what it was doing: the process tree lanes.py printed when it killed the stage, the last
task its log names and the log's last lines (CI shows only the end of a long output).
Every stage and lab test is shown beside its budget (tests/budgets.yml), OVER where it exceeded it.
Usage: time-report.py DIR [BUDGET_SECONDS]; DIR holds stages.tsv, tasks.jsonl and *.xml (pytest JUnit);
BUDGET_SECONDS defaults to the budget's total."""

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import budgets


def stages(d):
    rows = []
    path = d / "stages.tsv"
    for line in path.read_text().splitlines() if path.exists() else []:
        start, name, secs, status = line.split("\t")
        rows.append((int(start), name, int(secs), status))
    return sorted(rows)


def tests(d):
    out = []
    for xml in sorted(d.glob("*.xml")):
        for case in ET.parse(xml).getroot().iter("testcase"):
            failed = case.find("failure") is not None or case.find("error") is not None
            out.append((float(case.get("time", 0)), "%s::%s" % (case.get("classname", "").split(".")[-1],
                                                                 case.get("name")), xml.stem, failed))
    return out


def tasks(d):
    path = d / "tasks.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def against(secs, budget):
    """'budget  share' columns, and OVER when the budget is exceeded."""
    if not budget:
        return "%8s  %5s" % ("-", "")
    return "%8d  %4.0f%%%s" % (budget, 100.0 * secs / budget, "  OVER" if secs > budget else "")


def main():
    d = Path(sys.argv[1])
    plan = budgets.read()
    budget = int(sys.argv[2]) if len(sys.argv) > 2 else plan.get("total", 1800)
    rows = stages(d)
    print("\n===== where the time went (%s)" % d)
    print("%-34s %8s  %-15s %8s  %5s" % ("stage", "seconds", "result", "budget", "share"))
    for _, name, secs, status in [r for r in rows if r[1] != "total"] + [r for r in rows if r[1] == "total"]:
        indent = "  " if ":" in name else ""
        print("%-34s %8d  %-15s %s" % (indent + name, secs, status,
                                       against(secs, budget if name == "total" else plan["stages"].get(name))))
    total = [secs for _, name, secs, _ in rows if name == "total"]
    if total:
        print("total %d s of the %d s budget (%.0f %%)%s" % (
            total[-1], budget, 100.0 * total[-1] / budget,
            "; CI's ceiling is %d s" % plan["ceiling"] if plan.get("ceiling") else ""))
    slow_tests = sorted((t for t in tests(d) if t[2] == "integration-lab"), reverse=True)
    if slow_tests:
        print("\n%-78s %8s  %8s  %5s" % ("integration test", "seconds", "budget", "share"))
        for secs, name, _, failed in slow_tests:
            print("%-78s %8.0f  %s%s" % (name[:78], secs, against(secs, plan["lab_tests"].get(name.split("::")[-1])),
                                         "  FAILED" if failed else ""))
    timed = sorted(tasks(d), key=lambda r: -r["seconds"])
    if timed:
        print("\n%d slowest tasks of %d (%.0f s in tasks in all)" % (min(20, len(timed)), len(timed),
                                                                   sum(r["seconds"] for r in timed)))
        print("%8s  %-24s %-30s %s" % ("seconds", "stage", "playbook", "task"))
        for r in timed[:20]:
            print("%8.1f  %-24s %-30s %s" % (r["seconds"], r["stage"][:24], "/".join(Path(r["playbook"]).parts[-2:])[:30],
                                             r["task"][:80]))
    for line in failures(d, rows):
        print(line)


def _last(lines, tail):
    """The last task a playbook's output started, and its last non-empty lines."""
    task = [line for line in lines if line.startswith("TASK [")]
    return (["last task started: %s" % task[-1][:150]] if task else []) + \
        ["  " + line[:158] for line in [line for line in lines if line.strip()][-tail:]]


def failures(d, rows, tail=12):
    """What each failed stage was doing when it ended, for the end of the output."""
    out = []
    for _, name, secs, status in rows:
        if name == "total" or not status.startswith("FAILED"):
            continue
        out.append("\n===== %s %s after %d s" % (name, status, secs))
        killed = d / "logs" / ("%s.killed" % name)
        if killed.exists():
            out += [line[:160] for line in killed.read_text(errors="replace").splitlines()[:20]]
        log = d / "logs" / ("%s.log" % name)
        out.append("last lines of %s:" % log)
        out += _last(log.read_text(errors="replace").splitlines() if log.exists() else [], tail)
        live = d / "logs" / ("%s.live" % name)  # the output of the command it was running (test_lab.py)
        lines = live.read_text(errors="replace").splitlines() if live.exists() else []
        if lines:
            out.append("it was running: %s" % lines[0][:150])
            out += _last(lines[1:], tail)
    return out


if __name__ == "__main__":
    main()
