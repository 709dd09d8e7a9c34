"""The tooling that runs and times `make test`: the task_timings callback through a real ansible-playbook run,
scripts/lanes.py running commands side by side, and scripts/time-report.py reading what both recorded."""

import json
import re
import os
import time
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

PLAYBOOK = """
- name: Time two tasks
  hosts: all
  gather_facts: false
  tasks:
    - name: Sleep a little
      ansible.builtin.command: sleep 1.2
      changed_when: false
    - name: Answer at once
      ansible.builtin.debug:
        msg: done
"""


def test_task_timings_appends_each_tasks_wall_time(tmp_path):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    times = tmp_path / "times" / "tasks.jsonl"
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), GPULAB_TASK_TIMES=str(times),
               GPULAB_STAGE="molecule:demo")
    for _ in range(2):  # appended, not overwritten
        proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                               "-e", "ansible_python_interpreter=%s" % sys.executable, str(tmp_path / "play.yml")],
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in times.read_text().splitlines()]
    assert [r["task"] for r in rows] == ["Sleep a little", "Answer at once"] * 2
    assert all(r["stage"] == "molecule:demo" and r["play"] == "Time two tasks" for r in rows), rows
    assert rows[0]["playbook"].endswith("play.yml")
    assert rows[0]["seconds"] >= 1.2 and rows[1]["seconds"] < 1.2, rows


def test_task_timings_writes_nothing_without_a_file(tmp_path):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    env.pop("GPULAB_TASK_TIMES", None)
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=%s" % sys.executable, str(tmp_path / "play.yml")],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0 and list(tmp_path.iterdir()) == [tmp_path / "play.yml"]


def lanes(tmp_path, jobs, *specs, env=None):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "lanes.py"), str(jobs), str(tmp_path / "logs"),
                           *specs], capture_output=True, text=True, timeout=60, env=dict(os.environ, **(env or {})))
    return proc.returncode, proc.stdout


def test_lanes_run_side_by_side_and_print_each_log_whole(tmp_path):
    rc, out = lanes(tmp_path, 2, "slow=echo slow-1; sleep 1.5; echo slow-2", "fast=echo fast-1; echo fast-2",
                    "last=echo last-1")
    assert rc == 0, out
    # fast ran beside slow and ended first; each log is printed in one piece when its command ends
    assert out.index("fast-1\nfast-2\n") < out.index("slow-1\nslow-2\n")
    assert "lanes: started fast (2 running, 1 waiting)" in out
    assert out.index("lanes: fast passed") < out.index("lanes: started last")
    assert (tmp_path / "logs" / "last.log").read_text() == "last-1\n"


def test_lanes_start_nothing_new_after_a_failure(tmp_path):
    rc, out = lanes(tmp_path, 1, "bad=echo broken; exit 3", "never=echo ran")
    assert rc == 3, out
    assert "lanes: bad FAILED (rc=3)" in out and "lanes: not starting never" in out and "ran" not in out


def test_a_hung_lane_is_named_with_its_processes_and_killed(tmp_path):
    """A command past LANE_LIMIT fails with its process tree printed (what it waits on), all of it killed,
    and nothing new starts: a hang costs minutes, never CI's whole limit."""
    started = time.monotonic()
    rc, out = lanes(tmp_path, 1, "hung=echo waiting; sh -c 'sleep 47'", "never=echo ran",
                    env={"LANE_LIMIT": "2"})
    assert rc != 0 and time.monotonic() - started < 30, out
    assert "lanes: hung still running after 2 s (its hard limit); its processes:" in out
    assert "sleep 47" in out and "lanes: hung FAILED" in out and "waiting\n" in out
    assert "lanes: not starting never" in out and "ran\n" not in out
    assert subprocess.run(["pgrep", "-f", "sleep 47"], capture_output=True).returncode == 1


def test_lanes_refuse_a_spec_without_a_name(tmp_path):
    rc, out = lanes(tmp_path, 2, "echo no name")
    assert rc != 0


def test_time_report_tables(tmp_path):
    (tmp_path / "stages.tsv").write_text("100\tyamllint\t2\tpassed\n90\ttotal\t2100\tpassed\n"
                                         "110\tmolecule:inference\t900\tFAILED (rc=2)\n")
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"stage": "integration", "playbook": "playbooks/site.yml", "play": "p", "task": "Install nginx",
         "seconds": 31.5},
        {"stage": "molecule:inference", "playbook": "molecule/inference/converge.yml", "play": "p",
         "task": "Stage the model", "seconds": 40.25})))
    (tmp_path / "integration-lab.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.integration.test_lab" name="test_lab_up_rerun_changes_nothing"'
        ' time="612.4"/><testcase classname="tests.integration.test_lab" name="test_faults" time="80.1"><failure/>'
        '</testcase></testsuite></testsuites>')
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "time-report.py"), str(tmp_path), "2400"],
                         capture_output=True, text=True, check=True).stdout
    budget = yaml.safe_load((ROOT / "tests" / "budgets.yml").read_text())
    lines = [line.split() for line in out.splitlines()]
    table = lines[lines.index(["stage", "seconds", "result", "budget", "share"]) + 1:][:3]
    assert [words[0] for words in table] == ["yamllint", "molecule:inference", "total"]  # as started, total last
    row = {words[0]: words for words in table}
    # each stage beside its budget and share; over budget says so
    assert row["yamllint"][1:] == ["2", "passed", str(budget["stages"]["yamllint"]),
                               "%.0f%%" % (200.0 / budget["stages"]["yamllint"])]
    inference = budget["stages"]["molecule:inference"]
    assert row["molecule:inference"][1:5] == ["900", "FAILED", "(rc=2)", str(inference)]
    assert (row["molecule:inference"][-1] == "OVER") == (900 > inference)
    assert row["total"][1:] == ["2100", "passed", "2400", "88%"]
    assert "total 2100 s of the 2400 s budget (88 %%); CI's ceiling is %d s" % budget["ceiling"] in out
    rerun = budget["lab_tests"]["test_lab_up_rerun_changes_nothing"]
    test_row = next(words for words in lines if words and words[0] == "test_lab::test_lab_up_rerun_changes_nothing")
    assert test_row[1:4] == ["612", str(rerun), "%.0f%%" % (61240.0 / rerun)] and test_row[-1] == "OVER"
    assert out.index("test_lab::test_lab_up_rerun_changes_nothing") < out.index("test_lab::test_faults")
    assert re.search(r"test_lab::test_faults +80 +- +FAILED", out)  # no budget: a dash
    assert out.index("Stage the model") < out.index("Install nginx")
    assert "2 slowest tasks of 2 (72 s in tasks in all)" in out


HUNG_LAB_TEST = """
import subprocess


def test_waits_forever():
    subprocess.run(["sh", "-c", "echo waiting; sleep 47"], check=True)


def test_after_it():
    assert True
"""


def test_a_lab_test_past_its_hard_limit_is_named_with_its_processes_and_stopped(tmp_path):
    """tests/integration/conftest.py: a lab test at 3 x its budget fails, naming itself, the limit and the
    process it waited on; the command is killed and the next test runs."""
    (tmp_path / "test_lab.py").write_text(HUNG_LAB_TEST)
    (tmp_path / "budgets.yml").write_text("---\ntotal: 10\nlab_tests:\n  test_waits_forever: 1\n  test_after_it: 1\n")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                           "tests.integration.conftest", str(tmp_path / "test_lab.py")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, GPULAB_BUDGETS=str(tmp_path / "budgets.yml"),
                                   GPULAB_TIMES_DIR=str(tmp_path / "times")))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and time.monotonic() - started < 30, out
    assert "test_waits_forever ran past its hard limit of 3 s (3 x its budget in tests/budgets.yml)" in out
    assert "sleep 47" in out and "1 failed, 1 passed" in out
    assert subprocess.run(["pgrep", "-f", "sleep 47"], capture_output=True).returncode == 1


def test_a_lab_test_without_a_budget_stops_the_run(tmp_path):
    (tmp_path / "test_lab.py").write_text(HUNG_LAB_TEST)
    (tmp_path / "budgets.yml").write_text("---\nlab_tests:\n  test_after_it: 1\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                           "tests.integration.conftest", str(tmp_path / "test_lab.py")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, GPULAB_BUDGETS=str(tmp_path / "budgets.yml")))
    assert proc.returncode != 0 and "lab tests without a budget in tests/budgets.yml: test_waits_forever" in \
        proc.stdout + proc.stderr


DELEGATED = """
- name: Run a task on the controller for two hosts at once, as bmc_power's BMC call
  hosts: all
  gather_facts: false
  tasks:
    - name: Name the process that runs the delegated module
      ansible.builtin.shell: ps -o args= -p "$PPID"
      delegate_to: "{{ bmc_power_delegate_to }}"
      vars:
        ansible_connection: "{{ CONNECTION }}"
      changed_when: false
      register: runner
    - name: Show it
      ansible.builtin.debug:
        msg: "RUNNER {{ runner.stdout }}"
"""


def test_the_labs_bmc_calls_bypass_mitogen(tmp_path):
    """Under the lab's Mitogen strategy, bmc_power's call on the controller runs with the connection the lab sets
    (bmc_power_delegate_connection): a process per node's call, not a fork in one Mitogen context shared by every
    node's call (which could wait forever on a lock). The play delegates as roles/bmc_power/tasks/cap.yml does,
    with its connection expression; without the lab's setting the same play runs in Mitogen's context."""
    import ansible_mitogen.plugins.strategy as strategy
    cap = yaml.safe_load((ROOT / "roles" / "bmc_power" / "tasks" / "cap.yml").read_text())[0]
    expression = cap["vars"]["ansible_connection"].strip()
    lab = yaml.safe_load((ROOT / "inventories" / "lab" / "group_vars" / "gpu_nodes" / "power.yml").read_text())
    defaults = yaml.safe_load((ROOT / "roles" / "bmc_power" / "defaults" / "main.yml").read_text())
    (tmp_path / "play.yml").write_text(DELEGATED.replace('"{{ CONNECTION }}"', json.dumps(expression)))
    env = dict(os.environ, ANSIBLE_STRATEGY="mitogen_linear", ANSIBLE_STRATEGY_PLUGINS=os.path.dirname(
        strategy.__file__), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")

    def runners(connection):
        (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"vars": {
            "bmc_power_delegate_to": defaults["bmc_power_delegate_to"], "bmc_power_delegate_connection": connection},
            "hosts": {"h1": {"ansible_connection": "local"}, "h2": {"ansible_connection": "local"}}}}))
        proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                               str(tmp_path / "play.yml")], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        found = re.findall(r'"msg": "RUNNER (.*)"', proc.stdout)
        assert len(found) == 2, proc.stdout
        return found

    assert lab["bmc_power_delegate_connection"] == "ansible.builtin.local"
    assert all("AnsiballZ_command.py" in r and "mitogen" not in r for r in runners("ansible.builtin.local"))
    assert all("mitogen" in r for r in runners(defaults["bmc_power_delegate_connection"]))
