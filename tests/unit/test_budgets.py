"""tests/budgets.yml is what the README states and what the rig enforces: the README's table shows every budget
as the file has it; every lab test and every stage make test runs has one; the lab lane and the longest other
lane each fit the total, which leaves room below CI's ceiling."""

import ast
import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BUDGETS = yaml.safe_load((ROOT / "tests" / "budgets.yml").read_text())


def readme_table():
    text = (ROOT / "README.md").read_text()
    start = text.index("<!-- budgets: tests/budgets.yml -->")
    rows = {}
    for line in text[start:].splitlines()[3:]:
        if not line.startswith("|"):
            break
        name, seconds = [cell.strip() for cell in line.strip("|").split("|")][:2]
        rows[name.strip("`")] = int(seconds)
    return rows


def test_the_readme_states_every_budget_as_the_file_has_it():
    want = {"make test": BUDGETS["total"], "CI's ceiling": BUDGETS["ceiling"], **BUDGETS["stages"],
            **BUDGETS["lab_tests"]}
    assert readme_table() == want


def test_every_lab_test_has_a_budget_and_every_budget_a_test():
    tree = ast.parse((ROOT / "tests" / "integration" / "test_lab.py").read_text())
    tests = {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}
    assert tests == set(BUDGETS["lab_tests"])


def test_every_stage_make_test_runs_has_a_budget():
    specs = subprocess.run([str(ROOT / "scripts" / "molecule-all.sh"), "--specs"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    lanes = (ROOT / "scripts" / "test-lanes.sh").read_text()
    stages = {spec.split("=", 1)[0] for spec in specs} | set(re.findall(r'"([a-z-]+)=make ', lanes))
    assert stages == set(BUDGETS["stages"]), stages ^ set(BUDGETS["stages"])


def test_the_lanes_fit_the_total_with_room_below_the_ceiling():
    """The lab's tests fit its stage; the stages, given to scripts/lanes.py's lanes in make test's order (each
    takes the next stage when it frees), end within the total; the total leaves room below CI's ceiling."""
    assert sum(BUDGETS["lab_tests"].values()) <= BUDGETS["stages"]["integration-lab"]
    jobs = int(re.search(r'"\$\{TEST_JOBS:-(\d+)\}"', (ROOT / "scripts" / "test-lanes.sh").read_text()).group(1))
    make_stages = re.findall(r'"([a-z-]+)=make ', (ROOT / "scripts" / "test-lanes.sh").read_text())
    order = ["integration-lab"] + [s for s in make_stages if s != "integration-lab"] + \
        [s.split("=", 1)[0] for s in subprocess.run([str(ROOT / "scripts" / "molecule-all.sh"), "--specs"], cwd=ROOT,
                                                    capture_output=True, text=True, check=True).stdout.splitlines()]
    lanes = [0] * jobs
    for stage in order:
        free = lanes.index(min(lanes))
        lanes[free] += BUDGETS["stages"][stage]
    assert max(lanes) <= BUDGETS["total"] < BUDGETS["ceiling"], lanes
