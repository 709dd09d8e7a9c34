# Copyright: contributors to this project
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Aggregate callback: the wall time of every task of a run, appended as JSON lines to the file named by
GPULAB_TASK_TIMES, so a whole `make test` (every Molecule scenario and integration playbook) can say which
tasks its time went to (scripts/time-report.py). Does nothing when the variable is unset."""

from __future__ import annotations

DOCUMENTATION = r"""
name: task_timings
type: aggregate
short_description: append each task's wall time to a JSON lines file
description:
  - A task's time runs from its start to the start of the next task (or the end of the play), as
    C(ansible.posix.profile_tasks) counts it, across every host the task ran on.
  - One line per task with the playbook, play, task, its seconds, and the stage named by C(GPULAB_STAGE)
    (set by scripts/stage.sh), appended at the end of the run.
options:
  output_file:
    description: The JSON lines file to append to; nothing is recorded when unset.
    env:
      - name: GPULAB_TASK_TIMES
    type: path
requirements:
  - enabled in callbacks_enabled (ansible.cfg, .config/molecule/config.yml)
"""

import json
import os
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_timings"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._playbook = ""
        self._play = ""
        self._current = None
        self._rows = []

    def _close(self):
        if self._current is not None:
            row, start = self._current
            row["seconds"] = round(time.monotonic() - start, 3)
            self._rows.append(row)
            self._current = None

    def v2_playbook_on_start(self, playbook):
        self._playbook = os.path.relpath(playbook._file_name)

    def v2_playbook_on_play_start(self, play):
        self._close()
        self._play = play.get_name().strip()

    def _start(self, task):
        self._close()
        self._current = ({"stage": os.environ.get("GPULAB_STAGE", ""), "playbook": self._playbook,
                          "play": self._play, "task": task.get_name().strip()}, time.monotonic())

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._start(task)

    def v2_playbook_on_stats(self, stats):
        self._close()
        path = self.get_option("output_file")
        if not path or not self._rows:
            return
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in self._rows))
        self._rows = []
