"""callback_plugins/failure_summary.py through a real ansible-playbook run on local hosts: the failed and
the unreachable host are named with their play, task and message; a rescued and a healthy host are not."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PLAYBOOK = """
- name: Converge a small rack
  hosts: all
  gather_facts: false
  tasks:
    - name: Fail on the bad node only
      ansible.builtin.fail:
        msg: "driver mismatch on {{ inventory_hostname }}"
      when: inventory_hostname == 'node-bad'
    - name: Recover on the rescued node
      when: inventory_hostname == 'node-rescued'
      block:
        - name: Fail first
          ansible.builtin.fail:
            msg: transient
      rescue:
        - name: Carry on
          ansible.builtin.debug:
            msg: rescued
    - name: Ignore an error everywhere
      ansible.builtin.command: /bin/false
      changed_when: false
      ignore_errors: true
"""

INVENTORY = """
all:
  hosts:
    node-ok: {ansible_connection: local, ansible_python_interpreter: "%s"}
    node-bad: {ansible_connection: local, ansible_python_interpreter: "%s"}
    node-rescued: {ansible_connection: local, ansible_python_interpreter: "%s"}
    node-gone: {ansible_connection: ssh, ansible_host: 127.0.0.1, ansible_port: 1, ansible_ssh_timeout: 2}
""" % ((sys.executable,) * 3)


def test_failed_and_unreachable_hosts_are_named_with_their_task(tmp_path):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    out_file = tmp_path / "out" / "failed.json"
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               GPULAB_FAILURE_SUMMARY=str(out_file), ANSIBLE_CALLBACKS_ENABLED="failure_summary")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml")], env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "FAILED HOSTS (2)" in out, out
    assert ("node-bad: failed in play 'Converge a small rack', task 'Fail on the bad node only': "
            "driver mismatch on node-bad") in out, out
    assert ("node-gone: unreachable in play 'Converge a small rack', task 'Ignore an error everywhere'" in out
            and "Connection refused" in out.split("node-gone: unreachable")[1]), out
    assert "node-rescued:" not in out.split("FAILED HOSTS")[1], out
    assert "node-ok:" not in out.split("FAILED HOSTS")[1], out
    rows = json.loads(out_file.read_text())["hosts"]
    assert [(r["host"], r["state"]) for r in rows] == [("node-bad", "failed"), ("node-gone", "unreachable")]


RUN_ONCE_PLAYBOOK = """
- name: Converge a small rack
  hosts: all
  gather_facts: false
  tasks:
    - name: Fail on the bad node only
      ansible.builtin.fail:
        msg: "driver mismatch on {{ inventory_hostname }}"
      when: inventory_hostname == 'node-bad'
- name: Check the cluster once
  hosts: all
  gather_facts: false
  tasks:
    - name: Stop on every problem
      ansible.builtin.fail:
        msg: "2 problems:\\n{{ 'x' * 400 }}: one\\nnode-ok: two"
      run_once: true
"""


def test_a_failure_that_stopped_a_whole_play_comes_first_and_whole(tmp_path):
    """A run_once task's failure (preflight's) stopped every host of its play: it leads the summary, every line
    of its message kept (a host's own failure is cut to one line of 300 characters)."""
    (tmp_path / "play.yml").write_text(RUN_ONCE_PLAYBOOK)
    (tmp_path / "hosts.yml").write_text(INVENTORY.replace("    node-gone:", "    # node-gone:"))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CALLBACKS_ENABLED="failure_summary")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml")], env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    summary = out.split("FAILED HOSTS (2)")[1].splitlines()[1:6]
    assert summary[0].endswith("failed in play 'Check the cluster once', task 'Stop on every problem', which runs "
                               "once for every host of the play, so none of them went on:"), summary
    assert summary[1:4] == ["  2 problems:", "  %s: one" % ("x" * 400), "  node-ok: two"], summary
    assert summary[4].startswith("node-bad: failed in play 'Converge a small rack'"), summary
