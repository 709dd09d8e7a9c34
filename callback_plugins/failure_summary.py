# Copyright: contributors to this project
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Aggregate callback: at the end of a run, list every host that failed or became unreachable, with the
play and task where that first happened and the message, so one bad node in a rack of 32 is named
instead of scrolled past. Also writes the list as JSON when GPULAB_FAILURE_SUMMARY names a file."""

from __future__ import annotations

DOCUMENTATION = r"""
name: failure_summary
type: aggregate
short_description: name every failed or unreachable host and the task where it failed
description:
  - At the end of a playbook run, prints one line per host that failed (errors not ignored) or became
    unreachable, with the play, the task and the first line of the message.
  - The last failure of each host is kept, the one that took it out of the run (an earlier one was
    rescued). Hosts whose every failure a rescue handled are not listed.
  - A failure of a task that runs once for every host of its play (C(run_once), such as preflight's) stopped
    the whole play, so it comes first and whole, every line of its message.
options:
  output_file:
    description: Also write the summary as JSON to this file (created with its parent directory).
    env:
      - name: GPULAB_FAILURE_SUMMARY
    ini:
      - section: failure_summary
        key: output_file
    type: path
requirements:
  - enabled in callbacks_enabled (ansible.cfg)
"""

import json
import os

from ansible.plugins.callback import CallbackBase

MESSAGE_LIMIT = 300


def first_line(result):
    """The result's message, reduced to something that fits on one line of the summary."""
    msg = result.get("msg") or result.get("stderr") or result.get("reason") or ""
    if not isinstance(msg, str):
        msg = json.dumps(msg, default=str)
    msg = " ".join(msg.split())
    return msg if len(msg) <= MESSAGE_LIMIT else msg[:MESSAGE_LIMIT - 3] + "..."


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "failure_summary"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._play = ""
        self._failures = {}

    def v2_playbook_on_play_start(self, play):
        self._play = play.get_name().strip()

    def _record(self, result, state):
        host = result._host.get_name()
        entry = {"host": host, "state": state, "play": self._play, "task": result._task.get_name().strip(),
                 "msg": first_line(result._result)}
        if state == "failed" and result._task.run_once:
            msg = result._result.get("msg")
            entry.update(run_once=True, lines=msg.splitlines() if isinstance(msg, str) and msg.strip()
                         else [entry["msg"]])
        self._failures[host] = entry

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if ignore_errors:
            return
        self._record(result, "failed")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        # A host whose failures a rescue handled counts as rescued, not failed, in the recap: leave it out.
        rows = [entry for host, entry in sorted(self._failures.items())
                if stats.failures.get(host) or stats.dark.get(host)]
        rows.sort(key=lambda r: not r.get("run_once"))  # what stopped a whole play first
        if rows:
            self._display.banner("FAILED HOSTS (%d)" % len(rows))
            for r in rows:
                if r.get("run_once"):
                    self._display.display("%s: %s in play '%s', task '%s', which runs once for every host of the "
                                          "play, so none of them went on:" % (r["host"], r["state"], r["play"],
                                                                              r["task"]), stderr=False)
                    for line in r["lines"]:
                        self._display.display("  " + line, stderr=False)
                    continue
                self._display.display("%s: %s in play '%s', task '%s': %s"
                                      % (r["host"], r["state"], r["play"], r["task"], r["msg"]),
                                      stderr=False)
        path = self.get_option("output_file")
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                json.dump({"hosts": rows}, fh, indent=2)
                fh.write("\n")
