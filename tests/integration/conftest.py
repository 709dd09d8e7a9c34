"""Every lab test is bounded. Its budget (tests/budgets.yml, the README's table) is what it may cost in CI; at
budgets.HARD_LIMIT_FACTOR times its budget it has hung: the test fails saying what it was running (the command of
test_lab.run, its live output's last lines) with the process tree of the stage, and the command is killed.
A test is never retried: a failure is reported as it happened."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import budgets  # noqa: E402 - scripts/budgets.py

LAB_TESTS = budgets.read(Path(os.environ.get("GPULAB_BUDGETS", budgets.BUDGETS)))["lab_tests"]
LIVE = Path(os.environ.get("GPULAB_TIMES_DIR", ROOT / ".cache" / "times")) / "logs" / "integration-lab.live"


class HardLimit(Exception):
    """A lab test ran past HARD_LIMIT_FACTOR times its budget."""


def on_nodes():
    """What each lab node is running that started since the test began (apt, dpkg, a unit waiting), bounded."""
    out = []
    try:
        names = subprocess.run(["docker", "ps", "--filter", "label=gpulab.lab=1", "--format", "{{.Names}}"],
                               capture_output=True, text=True, check=False, timeout=20).stdout.split()
    except (OSError, subprocess.TimeoutExpired) as e:
        return "  (docker ps: %s)" % e
    for name in sorted(names):
        try:
            ps = subprocess.run(["docker", "exec", name, "ps", "-eo", "pid,etimes,stat,args", "--forest"],
                                capture_output=True, text=True, check=False, timeout=10).stdout.splitlines()
        except subprocess.TimeoutExpired:
            ps = ["  (ps did not answer within 10 s)"]
        out.append("%s:\n%s" % (name, "\n".join("  " + line for line in ps[:40])))
    return "\n".join(out)


def kill_descendants():
    """SIGKILL every process below this one (ansible-playbook, its forks and ssh, a load generator): what the
    hung test started must not outlive it."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    todo, found = [os.getpid()], []
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def what_it_waits_on(name, limit):
    lines = LIVE.read_text(errors="replace").splitlines() if LIVE.exists() else []
    tree = subprocess.run(["ps", "-o", "pid,etimes,stat,args", "--forest", "-g", str(os.getpgrp())],
                          capture_output=True, text=True, check=False).stdout
    return "%s ran past its hard limit of %d s (%d x its budget in tests/budgets.yml)\nit was running: %s\n%s\n" \
           "processes:\n%s\non the lab's nodes:\n%s" % (
               name, limit, budgets.HARD_LIMIT_FACTOR, lines[0] if lines else "(no command)",
               "\n".join("  " + line for line in lines[1:][-15:]), tree, on_nodes())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Arm an alarm over the test's setup, call and teardown (the first test's setup brings the lab up)."""
    budget = LAB_TESTS.get(item.name) if item.module.__name__.endswith("test_lab") else None
    if budget is None:
        yield
        return
    limit = budgets.hard_limit(budget)

    def expired(signum, frame):
        # Raised in the main thread once what it ran is killed: pytest reports the test and goes on.
        report = what_it_waits_on(item.name, limit)
        kill_descendants()
        raise HardLimit(report)

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def pytest_collection_modifyitems(items):
    """A lab test without a budget is a mistake: it would run unbounded and unaccounted."""
    missing = [i.name for i in items if i.module.__name__.endswith("test_lab") and i.name not in LAB_TESTS]
    if missing:
        raise pytest.UsageError("lab tests without a budget in tests/budgets.yml: %s" % ", ".join(missing))
