"""Benchmark callback: wall time of every task on every host, written as JSON to $BENCH_OUT."""

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: bench_timer
    type: aggregate
    short_description: record per-host task wall times for tests/bench
    description: Writes a JSON map of task name to a list of seconds into the file named by BENCH_OUT.
    requirements: [enable in callbacks_enabled]
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_timer"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._start = {}
        self.times = {}

    def v2_runner_on_start(self, host, task):
        self._start[(host.get_name(), task._uuid)] = time.perf_counter()

    def _done(self, result):
        key = (result._host.get_name(), result._task._uuid)
        if key in self._start:
            self.times.setdefault(result._task.get_name(), []).append(time.perf_counter() - self._start.pop(key))

    v2_runner_on_ok = _done
    v2_runner_on_failed = _done

    def v2_playbook_on_stats(self, stats):
        with open(os.environ["BENCH_OUT"], "w") as fh:
            json.dump(self.times, fh)
