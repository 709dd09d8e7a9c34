# -*- coding: utf-8 -*-
"""bmc_exporter (roles/bmc_exporter/files/bmc_exporter.py) against the lab's Redfish BMC over HTTPS: the
readings of healthy and faulted BMCs become metrics labelled with their node; a BMC that does not answer, a
wrong password and a certificate that does not verify are bmc_up 0 with the reason, never a reading; the
program serves what it polled on /metrics."""

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "lab", "bmc"))
sys.path.insert(0, os.path.join(ROOT, "roles", "bmc_exporter", "files"))

import bmc_exporter  # noqa: E402  (path set above)
import redfish_bmc  # noqa: E402
from ansible.module_utils import redfish_power  # noqa: E402

USER, PASSWORD = "labadmin", "unit-exporter-pw-S3CRET"


@pytest.fixture
def bmcs(tmp_path, cert):
    """Three lab BMCs: healthy, leaking with a hot inlet and a failed PSU, and one over its cap."""
    states = {"gpu-a1": {}, "gpu-b2": {"leak_detected": True, "coolant_inlet_c": 51.5, "psu_failed": True},
              "gpu-b3": {"limit_watts": 3000, "consumed_watts": 3400}}
    servers = {}
    for node, state in states.items():
        path = tmp_path / (node + ".json")
        path.write_text(json.dumps(state))
        server = redfish_bmc.make_server("127.0.0.1", 0, USER, PASSWORD, str(path), certfile=cert[0], keyfile=cert[1])
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[node] = server
    yield servers
    for server in servers.values():
        server.shutdown()
        server.server_close()


def _config(servers, cert, **overrides):
    nodes = [{"node": node, "address": "127.0.0.1", "port": s.server_address[1], "chassis_id": "",
              "validate_certs": True, "ca_file": cert[0]} for node, s in sorted(servers.items())]
    config = {"interval": 30, "timeout": 5, "workers": 4, "username": USER, "password": PASSWORD, "nodes": nodes}
    config.update(overrides)
    return config


def _samples(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_each_bmc_reading_becomes_its_nodes_metric(bmcs, cert):
    poller = bmc_exporter.Poller(_config(bmcs, cert), redfish_power)
    poller.poll()
    m = _samples(poller.render())
    for node in ("gpu-a1", "gpu-b2", "gpu-b3"):
        assert m['bmc_up{node="%s"}' % node] == 1
        assert m['bmc_leak_detection_present{node="%s"}' % node] == 1
    assert m['bmc_power_consumed_watts{node="gpu-a1"}'] == 3100 and m['bmc_power_limit_watts{node="gpu-a1"}'] == 0
    assert m['bmc_coolant_inlet_celsius{node="gpu-a1"}'] == 32 and m['bmc_coolant_outlet_celsius{node="gpu-a1"}'] == 41
    assert m['bmc_leak_detected{node="gpu-a1"}'] == 0 and m['bmc_psu_redundancy_ok{node="gpu-a1"}'] == 1
    assert m['bmc_reading_problems{node="gpu-a1"}'] == 0
    # the faulted BMC: the leak with the detector that reports it, the hot inlet, redundancy lost
    assert m['bmc_leak_detected{node="gpu-b2"}'] == 1
    assert m['bmc_leak_detector_leaking{node="gpu-b2",detector="Cold plates"}'] == 1
    assert m['bmc_coolant_inlet_celsius{node="gpu-b2"}'] == 51.5 and m['bmc_psu_redundancy_ok{node="gpu-b2"}'] == 0
    # over its cap
    assert (m['bmc_power_consumed_watts{node="gpu-b3"}'], m['bmc_power_limit_watts{node="gpu-b3"}']) == (3400, 3000)
    assert m["bmc_exporter_nodes"] == 3 and m["bmc_exporter_last_poll_timestamp_seconds"] > 0


def test_an_unreachable_bmc_a_wrong_password_and_a_bad_certificate_read_nothing(bmcs, cert, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    other = tmp_path / "other.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=x",
                    "-keyout", str(tmp_path / "other.key"), "-out", str(other)], check=True, capture_output=True)
    config = _config(bmcs, cert)
    config["nodes"][0]["port"] = closed                  # gpu-a1: nothing listens
    config["nodes"][2]["ca_file"] = str(other)           # gpu-b3: a certificate another CA signed
    poller = bmc_exporter.Poller(config, redfish_power)
    poller.poll()
    wrong = bmc_exporter.Poller(dict(config, password="wrong"), redfish_power)
    wrong.poll()
    m, w = poller.render(), wrong.render()
    assert 'bmc_up{node="gpu-a1"} 0' in m and 'bmc_up{node="gpu-b3"} 0' in m and 'bmc_up{node="gpu-b2"} 1' in m
    assert re.search(r'bmc_reading_problem\{node="gpu-a1",problem="BMC 127\.0\.0\.1 did not answer: [^"]*refused', m), m
    assert re.search(r'bmc_reading_problem\{node="gpu-b3",problem="BMC 127\.0\.0\.1 did not answer: [^"]*CERTIFICATE', m), m
    # no reading at all for a BMC that was not read
    assert 'bmc_power_consumed_watts{node="gpu-a1"}' not in m and 'bmc_leak_detected{node="gpu-b3"}' not in m
    assert 'bmc_reading_problem{node="gpu-b2",problem="GET /redfish/v1/Chassis: HTTP 401"} 1' in w, w
    assert PASSWORD not in m + w and "wrong" not in w


def test_the_program_serves_what_it_polled(bmcs, cert, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(_config(bmcs, cert)))
    libdir = tmp_path / "lib" / "ansible" / "module_utils"
    libdir.mkdir(parents=True)
    for package in (libdir.parent, libdir):
        (package / "__init__.py").write_text("")
    for name in ("redfish_power.py", "check_result.py"):  # what the role copies (_bmc_exporter_module_utils)
        with open(os.path.join(ROOT, "module_utils", name)) as handle:
            (libdir / name).write_text(handle.read())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-I", os.path.join(ROOT, "roles", "bmc_exporter", "files",
                                                                "bmc_exporter.py"),
                             "--config", str(config), "--libdir", str(tmp_path / "lib"), "--listen", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=2) as response:
                    text = response.read().decode()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode()[-2000:]
                time.sleep(0.2)
        assert 'bmc_leak_detected{node="gpu-b2"} 1' in text and 'bmc_up{node="gpu-a1"} 1' in text, text
    finally:
        proc.terminate()
        proc.wait(timeout=10)
