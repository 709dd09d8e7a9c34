# -*- coding: utf-8 -*-
"""fabric_probe: every target pinged at once, only failures returned; a ping that hangs or cannot start is a
failure. Real iputils ping on loopback where it is installed (make setup installs it), fakes for the rest."""

import shutil

import pytest

import fabric_probe
from helpers import run_module

PING = shutil.which("ping")


def target(dst="127.0.0.1", src="127.0.0.1", payload=8972, **extra):
    return dict({"rail": "rail0", "src": "n1", "dst": "n2", "src_addr": src, "dst_addr": dst, "payload": payload},
                **extra)


@pytest.mark.skipif(PING is None, reason="iputils ping is not installed (make setup installs it)")
def test_real_pings_on_loopback_only_failures_come_back():
    targets = [target(), target(payload=65000), target(src="198.18.255.253", dst="127.0.0.1"), target(payload=70000)]
    result, failed, runner = run_module(fabric_probe.main, {"targets": targets, "timeout": 1}, {},
                                        bins={"ping": PING})
    assert not failed, result
    assert (result["pairs_checked"], result["pairs_ok"], result["changed"]) == (4, 2, False)
    assert [r["item"] for r in result["results"]] == targets[2:]
    assert result["results"][0]["rc"] == 2 and "Cannot assign requested address" in result["results"][0]["stderr"]
    assert result["results"][1]["rc"] == 1 and "100% packet loss" in result["results"][1]["stdout"]
    assert runner.calls == []  # pings run side by side through Popen, not one run_command at a time


class FakeProc:
    def __init__(self, rc, out=b"", err=b"", hangs=False):
        self.returncode, self.out, self.err, self.hangs, self.killed = None, out, err, hangs, False
        self._rc = rc

    def poll(self):
        if self.hangs and not self.killed:
            return None
        self.returncode = -9 if self.killed else self._rc
        return self.returncode

    def kill(self):
        self.killed = True

    def communicate(self):
        return self.out, self.err


def test_concurrency_timeouts_start_failures_and_undecodable_output():
    plan = {"10.0.0.1": FakeProc(0), "10.0.0.2": FakeProc(1, b"1 packets transmitted, 0 received\xff\n"),
            "10.0.0.3": FakeProc(None, hangs=True), "10.0.0.5": FakeProc(0)}
    started, peak, now = [], [0], [0.0]

    def popen(argv, **kwargs):
        dst = argv[-1]
        if dst == "10.0.0.4":
            raise OSError("[Errno 24] Too many open files")
        started.append(argv)
        running = sum(1 for a in started if plan[a[-1]].poll() is None)
        peak[0] = max(peak[0], running)
        return plan[dst]

    def sleep(seconds):
        now[0] += 1.0

    targets = [target(dst="10.0.0.%d" % i) for i in range(1, 6)]
    failures = fabric_probe.probe(targets, "/bin/ping", 1, 2, popen=popen, clock=lambda: now[0], sleep=sleep)
    assert [f["item"]["dst_addr"] for f in failures] == ["10.0.0.2", "10.0.0.3", "10.0.0.4"]
    assert failures[0]["rc"] == 1 and failures[0]["stdout"] == "1 packets transmitted, 0 received\ufffd\n"
    assert failures[1]["rc"] is None and failures[1]["stderr"] == "ping did not exit within 6 s"
    assert plan["10.0.0.3"].killed
    assert failures[2]["rc"] is None and "could not start" in failures[2]["stderr"]
    assert peak[0] <= 2
    assert started[0] == ["/bin/ping", "-n", "-M", "do", "-s", "8972", "-c", "1", "-W", "1", "-I", "127.0.0.1",
                          "10.0.0.1"]


@pytest.mark.parametrize("args,message", [
    ({"targets": [{"dst_addr": "127.0.0.1", "payload": 100}]}, "has no src_addr"),
    ({"targets": [target(payload="jumbo")]}, "payload must be a whole number"),
    ({"targets": [target(payload=-1)]}, "payload must be a whole number"),
    ({"targets": [target()], "timeout": 0}, "at least 1"),
    ({"targets": [target()], "concurrency": 0}, "at least 1"),
])
def test_bad_targets_fail_before_any_ping(args, message):
    result, failed, runner = run_module(fabric_probe.main, args, {}, bins={"ping": "/nonexistent/ping"})
    assert failed and message in result["msg"], result


def test_no_ping_is_a_clear_failure():
    result, failed, runner = run_module(fabric_probe.main, {"targets": [target()]}, {}, bins={})
    assert failed and 'Failed to find required executable "ping"' in result["msg"]


def test_no_targets_is_nothing_checked():
    result, failed, runner = run_module(fabric_probe.main, {"targets": []}, {}, bins={"ping": "/bin/ping"})
    assert not failed and (result["pairs_checked"], result["pairs_ok"], result["results"]) == (0, 0, [])



def test_a_failure_is_probed_again_fewer_at_once_and_counts_only_when_it_fails_again(monkeypatch):
    """A healthy fabric under a burst of thousands of probes drops a few replies (every ping socket gets every
    reply); a failing target is probed again with an eighth of the concurrency, and fails only if it fails again."""
    calls = []
    flaky, broken = target(dst="10.0.0.2"), target(dst="10.0.0.3")

    def probe(targets, ping, timeout, concurrency):
        calls.append(([t["dst_addr"] for t in targets], concurrency))
        bad = {"10.0.0.2", "10.0.0.3"} if len(calls) == 1 else {"10.0.0.3"}
        return [{"rc": 1, "stdout": "100% packet loss", "stderr": "", "item": t} for t in targets
                if t["dst_addr"] in bad]
    monkeypatch.setattr(fabric_probe, "probe", probe)
    targets = [target(dst="10.0.0.1"), flaky, broken]
    result, failed, runner = run_module(fabric_probe.main, {"targets": targets}, {}, bins={"ping": "/bin/ping"})
    assert not failed, result
    assert (result["pairs_checked"], result["pairs_ok"], result["retried"]) == (3, 2, 2)
    assert [r["item"] for r in result["results"]] == [broken]
    assert calls == [(["10.0.0.1", "10.0.0.2", "10.0.0.3"], 64), (["10.0.0.2", "10.0.0.3"], 8)]
    calls.clear()
    result, failed, runner = run_module(fabric_probe.main, {"targets": targets, "retries": 0}, {},
                                        bins={"ping": "/bin/ping"})
    assert (result["pairs_ok"], result["retried"], len(calls)) == (1, 2, 1)
    result, failed, runner = run_module(fabric_probe.main, {"targets": targets, "retries": -1}, {},
                                        bins={"ping": "/bin/ping"})
    assert failed and "retries must be 0 or more, got -1" in result["msg"]
