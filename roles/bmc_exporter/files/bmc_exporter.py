#!/usr/bin/python3
# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""bmc-exporter: every node's BMC readings as Prometheus metrics (node power draw and cap, coolant inlet and
outlet, leak detectors, PSU redundancy).

Polls each BMC over Redfish every --interval seconds, all BMCs at once (--workers), and serves the latest
readings on /metrics. The readings go through the same functions as the redfish_power module
(module_utils/redfish_power.py, copied beside this program by the bmc_exporter role), so an alert and the
provisioning check read a BMC the same way, and fail closed the same way: a BMC that does not answer, or a
reading it cannot account for, is bmc_up 0 or a bmc_reading_problem naming the resource, field and value,
never a healthy number. Python standard library only.

Usage: bmc_exporter.py --config FILE --libdir DIR [--listen ADDR] [--port N]
The config (JSON, from the bmc_exporter role; it holds the BMC credentials): {"interval": s, "timeout": s,
"workers": n, "username": ..., "password": ..., "nodes": [{"node", "address", "port", "chassis_id",
"ca_file", "validate_certs"}]}.
"""

import argparse
import base64
import json
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_PROBLEMS = 5  # problem series per node (each one is a label value)


class Poller(object):
    def __init__(self, config, redfish):
        self.config = config
        self.rf = redfish
        self.lock = threading.Lock()
        self.results = {}
        self.last_poll = None
        self.last_duration = None

    def _get(self, node):
        auth = base64.b64encode(("%s:%s" % (self.config["username"], self.config["password"])).encode()).decode()
        base = "https://%s:%d" % (node["address"], int(node.get("port") or 443))
        if node.get("validate_certs", True):
            context = ssl.create_default_context(cafile=node.get("ca_file") or None)
        else:
            context = ssl._create_unverified_context()  # the operator chose not to verify this BMC
        timeout = float(self.config.get("timeout", 10))

        def get(path):
            request = urllib.request.Request(base + path, headers={"Authorization": "Basic " + auth,
                                                                   "Accept": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                    body = json.loads(response.read().decode("utf-8", "replace"))
            except urllib.error.HTTPError as err:
                raise self.rf.RedfishError("GET %s: HTTP %d" % (path, err.code))
            except ValueError:
                raise self.rf.RedfishError("GET %s: the answer is not JSON" % path)
            if not isinstance(body, dict):
                raise self.rf.RedfishError("GET %s: the answer is %s, not an object" % (path, type(body).__name__))
            return body
        return get

    def read(self, node):
        """One BMC's readings: {up, consumed_watts, limit_watts, cooling, power, problems}."""
        rf = self.rf
        out = {"up": 0, "problems": []}
        try:
            get = self._get(node)
            chassis_path = rf.chassis_path(get, node.get("chassis_id"))
            chassis = get(chassis_path)
            power = get(rf.odata_id(chassis, "Power")) if rf.odata_id(chassis, "Power") else None
            environment = None
            if rf.odata_id(chassis, "EnvironmentMetrics") and not (power and power.get("PowerControl")):
                environment = get(rf.odata_id(chassis, "EnvironmentMetrics"))
            limit = None
            control = None
            if rf.odata_id(chassis, "Controls"):
                collection = get(rf.odata_id(chassis, "Controls"))
                control = rf.find_power_limit_control([get(m) for m in rf.chassis_members(collection)])
            if control is not None:
                limit = rf.control_limit(control)
            elif power is not None:
                limit = rf.power_control_limit(power)
            else:
                out["problems"].append("chassis %s offers no power limit (Controls or Power)" % chassis_path)
            out["limit_watts"] = limit
            out["power"] = rf.power_summary(power, environment)
            out["cooling"] = rf.read_cooling(get, chassis)
            out["problems"] += out["power"]["problems"] + out["cooling"]["problems"]
            out["up"] = 1
        except rf.RedfishError as err:
            out["problems"].append(str(err))
        except (OSError, ssl.SSLError) as err:  # refused, timeout, TLS: the BMC did not answer
            out["problems"].append("BMC %s did not answer: %s" % (node["address"], getattr(err, "reason", err)))
        except Exception as err:  # noqa: BLE001 - a shape nothing above accounts for: report, never crash
            out["problems"].append("unexpected %s: %s" % (type(err).__name__, err))
        return out

    def poll(self):
        started = time.monotonic()
        nodes = self.config.get("nodes") or []
        with ThreadPoolExecutor(max_workers=max(1, int(self.config.get("workers", 16)))) as pool:
            results = dict(zip([n["node"] for n in nodes], pool.map(self.read, nodes)))
        with self.lock:
            self.results = results
            self.last_poll = time.time()
            self.last_duration = time.monotonic() - started

    def loop(self):
        interval = float(self.config.get("interval", 30))
        while True:
            started = time.monotonic()
            self.poll()
            time.sleep(max(1.0, interval - (time.monotonic() - started)))

    def render(self):
        with self.lock:
            results, last, duration = dict(self.results), self.last_poll, self.last_duration
        families = [
            ("bmc_up", "1 when the node's BMC answered every request of the last poll."),
            ("bmc_power_consumed_watts", "Node power draw the BMC reports (W)."),
            ("bmc_power_limit_watts", "Node power cap set in the BMC (W); 0 = no cap."),
            ("bmc_coolant_inlet_celsius", "Coolant inlet temperature (C)."),
            ("bmc_coolant_outlet_celsius", "Coolant outlet temperature (C)."),
            ("bmc_leak_detection_present", "1 when the BMC exposes leak detection."),
            ("bmc_leak_detected", "1 when any leak detector of the node reports a leak."),
            ("bmc_leak_detector_leaking", "1 for each leak detector (group) reporting a leak."),
            ("bmc_psu_redundancy_ok", "1 while the power supplies are redundant, 0 when redundancy is lost."),
            ("bmc_reading_problems", "Readings of the last poll the exporter could not account for."),
            ("bmc_reading_problem", "1 per reading problem (the first %d), named." % MAX_PROBLEMS),
        ]
        samples = dict((name, []) for name, _ in families)

        def add(name, node, value, extra=""):
            if value is None:
                return
            samples[name].append('%s{node="%s"%s} %s' % (name, _escape(node), extra, _number(value)))

        for node in sorted(results):
            r = results[node]
            add("bmc_up", node, r["up"])
            add("bmc_reading_problems", node, len(r["problems"]))
            for problem in r["problems"][:MAX_PROBLEMS]:
                add("bmc_reading_problem", node, 1, ',problem="%s"' % _escape(problem[:160]))
            if not r["up"]:
                continue
            add("bmc_power_consumed_watts", node, r["power"]["consumed_watts"])
            add("bmc_power_limit_watts", node, r.get("limit_watts"))
            psu = r["power"]["psu_redundancy_ok"]
            add("bmc_psu_redundancy_ok", node, None if psu is None else int(psu))
            cooling = r["cooling"]
            add("bmc_coolant_inlet_celsius", node, cooling["coolant_inlet_c"])
            add("bmc_coolant_outlet_celsius", node, cooling["coolant_outlet_c"])
            add("bmc_leak_detection_present", node, int(cooling["leak_detection"]))
            add("bmc_leak_detected", node, int(cooling["leak_detected"]))
            for detector in cooling["leaks"]:
                add("bmc_leak_detector_leaking", node, 1, ',detector="%s"' % _escape(detector))
        lines = []
        for name, help_text in families:
            lines += ["# HELP %s %s" % (name, help_text), "# TYPE %s gauge" % name] + samples[name]
        lines += ["# HELP bmc_exporter_last_poll_timestamp_seconds When the last poll of every BMC ended.",
                  "# TYPE bmc_exporter_last_poll_timestamp_seconds gauge"]
        if last is not None:
            lines.append("bmc_exporter_last_poll_timestamp_seconds %s" % _number(last))
            lines += ["# HELP bmc_exporter_poll_duration_seconds How long the last poll of every BMC took.",
                      "# TYPE bmc_exporter_poll_duration_seconds gauge",
                      "bmc_exporter_poll_duration_seconds %s" % _number(duration)]
        lines += ["# HELP bmc_exporter_nodes Nodes whose BMC this exporter polls.", "# TYPE bmc_exporter_nodes gauge",
                  "bmc_exporter_nodes %d" % len(self.config.get("nodes") or [])]
        return "\n".join(lines) + "\n"


def _escape(text):
    return str(text).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value):
    return repr(float(value)) if isinstance(value, float) else str(value)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--libdir", required=True, help="holds ansible/module_utils/redfish_power.py")
    parser.add_argument("--listen", default="")
    parser.add_argument("--port", type=int, default=9610)
    args = parser.parse_args(argv)
    with open(args.config) as handle:
        config = json.load(handle)
    sys.path.insert(0, args.libdir)
    from ansible.module_utils import redfish_power  # pylint: disable=import-outside-toplevel
    poller = Poller(config, redfish_power)
    poller.poll()
    threading.Thread(target=poller.loop, daemon=True).start()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *log_args):  # quiet: Prometheus scrapes every few seconds
            pass

        def do_GET(self):  # noqa: N802 (http.server's naming)
            if self.path.split("?")[0] != "/metrics":
                self.send_response(404)
                self.end_headers()
                return
            data = poller.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    ThreadingHTTPServer((args.listen, args.port), Handler).serve_forever()


if __name__ == "__main__":
    sys.exit(main())
