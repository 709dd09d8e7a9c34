# -*- coding: utf-8 -*-
"""Event-Driven Ansible: the Alertmanager source (extensions/eda/plugins/event_source/alertmanager.py) and the
rulebook (roles/eda_rulebook).

The source, as a pure function and as the HTTP server ansible-rulebook runs: Alertmanager's version 4 payload
(the webhook format of https://prometheus.io/docs/alerting/latest/configuration/#webhook_config) becomes one
event per alert with its node in meta.hosts; anything it cannot account for, mutated payloads included, is
refused whole with the field and value, never an exception and never a wider host limit. The rulebook: the
committed controller rulebook is the template's rendering with the defaults, both modes pass ansible-rulebook's
own schema, and the real ansible-rulebook (Java's rules engine included) runs the local one against a stand-in
playbook: a burst of alerts for one node starts one run, limited to that node; another node gets its own; a
resolution runs once more.
"""

import asyncio
import copy
import json
import os
import runpy
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import role_docs
from conftest import ROOT

SOURCE = Path(ROOT) / "extensions" / "eda" / "plugins" / "event_source" / "alertmanager.py"
COMMITTED = Path(ROOT) / "extensions" / "eda" / "rulebooks" / "gpu_remediation.yml"
BIN = Path(sys.executable).parent
plugin = runpy.run_path(str(SOURCE))
alert_events, Refused = plugin["alert_events"], plugin["Refused"]
ARGS = {"data_host_path": "labels.node", "skip_original_data": True}


def alert(node="gpu-b2", name="GPUXidErrors", status="firing", **labels):
    return {"status": status, "labels": dict({"alertname": name, "node": node, "severity": "critical"}, **labels),
            "annotations": {"summary": "Xid errors on GPU 4 of %s" % node},
            "startsAt": "2026-12-06T03:00:00.000Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://mon-1:9090/graph", "fingerprint": "8f1c2e0a6b3d4f59"}


def notification(*alerts, status="firing"):
    return {"version": "4", "groupKey": '{}/{alertname=~"GPUXidErrors"}:{alertname="GPUXidErrors", node="gpu-b2"}',
            "truncatedAlerts": 0, "status": status, "receiver": "eda", "groupLabels": {"alertname": "GPUXidErrors"},
            "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://mon-1:9093", "alerts": list(alerts)}


def test_each_alert_is_an_event_limited_to_its_node():
    # an alert without the host label carries no hosts (the rulebook's conditions skip it)
    no_label = alert(status="resolved")
    del no_label["labels"]["node"]
    events = alert_events(notification(alert("gpu-b2"), alert("gpu-a1", "GPUHealthCheckFailed", gpu="3"), no_label),
                          ARGS, "alerts", {"Host": "198.18.0.1"})
    assert [e["meta"].get("hosts") for e in events] == [["gpu-b2"], ["gpu-a1"], None]
    assert events[1]["alert"]["labels"]["gpu"] == "3" and events[2]["alert"]["status"] == "resolved"
    assert all(e["meta"]["endpoint"] == "alerts" for e in events)


@pytest.mark.parametrize("payload,reason", [
    ([], "payload: not a JSON object but list"),
    (dict(notification(alert()), version="3"), 'payload.version: "3"'),
    ({"version": "4"}, "payload.alerts: missing"),
    (dict(notification(), alerts={"a": 1}), 'payload.alerts: {"a": 1} (a list of alerts)'),
    (dict(notification(alert()), truncatedAlerts=-1), "payload.truncatedAlerts: -1"),
    (notification("firing"), 'payload.alerts[0]: "firing" (an alert object)'),
    (notification(dict(alert(), status="pending")), 'payload.alerts[0].status: "pending" (firing or resolved)'),
    (notification(alert(), dict(alert(), labels={"alertname": "X", "node": 7})), "payload.alerts[1].labels:"),
    (notification(dict(alert(), labels={"node": "gpu-a1"})), "payload.alerts[0].labels.alertname: missing"),
    (notification(alert("all")), 'payload.alerts[0].labels.node: "all" (a plain host name'),
    (notification(alert("")), 'payload.alerts[0].labels.node: ""'),
    (notification(alert("gpu_nodes")), 'payload.alerts[0].labels.node: "gpu_nodes"'),
    (notification(alert("gpu-*")), 'payload.alerts[0].labels.node: "gpu-*"'),
    (notification(alert("gpu-a1,gpu-a2")), 'payload.alerts[0].labels.node: "gpu-a1,gpu-a2"'),
    (notification(alert("!gpu-a1")), 'payload.alerts[0].labels.node: "!gpu-a1"'),
    (notification(dict(alert(), annotations={"summary": "{{ lookup('pipe', 'id') }}"})),
     "payload.alerts[0].annotations.summary: holds a Jinja template marker"),
    (notification(alert(job="{% if 1 %}")), "payload.alerts[0].labels.job: holds a Jinja template marker"),
], ids=["list", "version", "no-alerts", "alerts-map", "truncated-count", "alert-string", "status",
        "label-number", "no-alertname", "host-all", "host-empty", "host-group", "host-glob", "host-list", "host-negation",
        "jinja-annotation", "jinja-label"])
def test_what_the_source_cannot_account_for_is_refused_whole(payload, reason):
    with pytest.raises(Refused) as exc:
        alert_events(payload, ARGS)
    assert str(exc.value).startswith(reason), str(exc.value)


def test_a_header_with_a_template_is_refused():
    with pytest.raises(Refused, match=r"headers\.X-Note: holds a Jinja template marker"):
        alert_events(notification(alert()), ARGS, "alerts", {"X-Note": "{{ 7 * 7 }}"})


def _mutations():
    """A valid notification with one value replaced anywhere: by another type, an odd string, or removed."""
    odd = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=12), st.lists(st.integers(), max_size=2),
                    st.sampled_from(["all", "gpu-*", "a,b", "{{ x }}", "firing", "resolved", "4", "gpu-b2", ""]))
    return st.tuples(st.lists(st.sampled_from(["version", "alerts", 0, 1, "status", "labels", "node", "alertname",
                                               "annotations", "summary", "truncatedAlerts"]), min_size=1, max_size=4),
                     st.one_of(odd, st.just(KeyError)))


def _mutate(payload, path, value):
    node = payload
    for key in path[:-1]:
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            return payload
    key = path[-1]
    if isinstance(node, dict) and isinstance(key, str):
        if value is KeyError:
            node.pop(key, None)
        else:
            node[key] = value
    elif isinstance(node, list) and isinstance(key, int) and key < len(node):
        if value is KeyError:
            del node[key]
        else:
            node[key] = value
    return payload


@settings(max_examples=300)
@given(_mutations())
def test_mutated_notifications_are_refused_or_limited_to_a_plain_host(mutation):
    path, value = mutation
    payload = _mutate(copy.deepcopy(notification(alert("gpu-b2"), alert("gpu-a1", "GPUHealthCheckFailed"))),
                      path, value)
    try:
        events = alert_events(payload, ARGS)
    except Refused as exc:
        assert str(exc).startswith(("payload", "headers", "endpoint")), str(exc)
        return
    for event in events:
        assert event["alert"]["status"] in ("firing", "resolved")
        assert all(isinstance(v, str) for v in event["alert"]["labels"].values())
        hosts = event["meta"].get("hosts", [])
        assert all(plugin["HOST"].match(h) and h not in ("all", "ungrouped", "localhost") for h in hosts), hosts
        assert "{{" not in json.dumps(event)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(port, body, path="alerts"):
    request = urllib.request.Request("http://127.0.0.1:%d/%s" % (port, path), data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_server_queues_good_notifications_and_answers_bad_ones_400():
    port, queue, loop = _free_port(), None, asyncio.new_event_loop()
    queue = asyncio.Queue()
    task = loop.create_task(plugin["main"](queue, {"host": "127.0.0.1", "port": port, "data_host_path": "labels.node"}))
    threading.Thread(target=loop.run_forever, daemon=True).start()
    try:
        for _ in range(50):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        good = json.dumps(notification(alert("gpu-b2"), alert("gpu-b3"))).encode()
        assert _post(port, good) == (202, "2 alerts\n")
        status, text = _post(port, b"{not json")
        assert status == 400 and text.startswith("payload: not JSON"), text
        status, text = _post(port, json.dumps(notification(alert("all"))).encode())
        assert status == 400 and 'labels.node: "all"' in text, text
        events = []
        while not queue.empty():
            events.append(queue.get_nowait())
        # without skip_original_data the whole notification comes first, as with ansible.eda.alertmanager
        assert [sorted(e) for e in events] == [["meta", "payload"], ["alert", "meta"], ["alert", "meta"]]
        assert [e["meta"].get("hosts") for e in events] == [None, ["gpu-b2"], ["gpu-b3"]]
    finally:
        loop.call_soon_threadsafe(task.cancel)
        time.sleep(0.2)
        loop.call_soon_threadsafe(loop.stop)


def _render(tmp_path, mode, **extra):
    dest = tmp_path / ("%s.yml" % mode)
    extra_vars = dict({"eda_rulebook_mode": mode, "eda_rulebook_dest": str(dest)}, **extra)
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "playbooks/eda.yml",
                           "-e", json.dumps(extra_vars)], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return dest


def _schema():
    import ansible_rulebook
    return json.loads((Path(ansible_rulebook.__file__).parent / "schema" / "ruleset_schema.json").read_text())


def test_the_committed_controller_rulebook_is_the_rendered_default(tmp_path):
    rendered = _render(tmp_path, "controller")
    assert rendered.read_text() == COMMITTED.read_text(), \
        "re-render extensions/eda/rulebooks/gpu_remediation.yml (README, Event-Driven Ansible)"
    book = yaml.safe_load(COMMITTED.read_text())
    jsonschema.validate(book, _schema())
    rules = book[0]["rules"]
    assert [r["action"]["run_job_template"]["name"] for r in rules] == ["gpu-lab remediate"] * 2
    assert all(r["action"]["run_job_template"]["job_args"]["limit"] == "{{ event.alert.labels.node }}" for r in rules)
    assert [r["throttle"] for r in rules] == [
        {"once_within": "120 seconds", "group_by_attributes": ["event.alert.labels.node"]},
        {"once_after": "30 seconds", "group_by_attributes": ["event.alert.labels.node"]}]
    assert "ansible.eda.alertmanager" in book[0]["sources"][0]


def test_the_role_documents_what_it_reads():
    role_docs.assert_defaults_specified("eda_rulebook")
    role_docs.assert_readme_lists("eda_rulebook", role_docs.spec("eda_rulebook"))


def test_bad_rulebook_settings_are_named(tmp_path):
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "playbooks/eda.yml", "-e",
                           json.dumps({"eda_rulebook_cooldown_seconds": 0, "eda_rulebook_alerts": ["GPU Xid"],
                                       "eda_rulebook_dest": str(tmp_path / "x.yml")})],
                          cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")))
    assert proc.returncode != 0 and not (tmp_path / "x.yml").exists()
    assert "localhost: eda_rulebook_mode=local" in proc.stdout and "eda_rulebook_cooldown_seconds=0 (at least 1)" \
        in proc.stdout, proc.stdout[-2000:]


STAND_IN = """\
- name: Stand-in for remediate.yml
  hosts: all
  gather_facts: false
  tasks:
    - name: Record the run
      ansible.builtin.lineinfile:
        path: {log}
        line: "{{{{ inventory_hostname }}}} {{{{ remediate_alert.name }}}} {{{{ remediate_alert.status }}}} {{{{ remediate_reports_dir }}}}"
        create: true
      throttle: 1
"""


@pytest.mark.skipif(shutil.which("java") is None, reason="ansible-rulebook needs Java 17 (make setup installs it)")
def test_the_rulebook_runs_once_per_node_per_cooldown_and_again_on_resolution(tmp_path):
    """Firing alerts: one run per node per cooldown. Resolutions: one re-check for those arriving together, after
    the settle time; a resolution after that (the real one, after a check flapped) gets its own run."""
    log = tmp_path / "runs.log"
    playbook = tmp_path / "stand_in.yml"
    playbook.write_text(STAND_IN.format(log=log))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {n: {"ansible_connection": "local",
                                                               "ansible_python_interpreter": sys.executable}
                                                           for n in ("gpu-a1", "gpu-b2", "gpu-b3")}}}))
    port = _free_port()
    rulebook = _render(tmp_path, "local", eda_rulebook_listen_host="127.0.0.1", eda_rulebook_listen_port=port,
                       eda_rulebook_playbook=str(playbook), eda_rulebook_reports_dir=str(tmp_path / "reports"),
                       eda_rulebook_extra_vars={}, eda_rulebook_resolve_settle_seconds=2)
    jsonschema.validate(yaml.safe_load(rulebook.read_text()), _schema())
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), PATH="%s:%s" % (BIN, os.environ["PATH"]))
    env.pop("GPULAB_TASK_TIMES", None)
    proc = subprocess.Popen([str(BIN / "ansible-rulebook"), "-r", str(rulebook), "-i", str(inventory),
                             "-S", str(SOURCE.parent)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while _post_status(port) != 400:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.poll() else "no answer"
            time.sleep(0.5)
        # a burst for gpu-b2 (two alerts, one repeated), one alert for gpu-b3, one outside the rulebook's list
        burst = [notification(alert("gpu-b2"), alert("gpu-b2", "GPUHealthCheckFailed", gpu="4")),
                 notification(alert("gpu-b2")), notification(alert("gpu-b3", "CoolantLeak")),
                 notification(alert("gpu-a1", "NodePacketLoss"))]
        for payload in burst:
            assert _post(port, json.dumps(payload).encode())[0] == 202
        _wait_lines(log, 2, proc)
        resolved = json.dumps(notification(alert("gpu-b2", status="resolved"), status="resolved")).encode()
        flapped = json.dumps(notification(alert("gpu-b2", "GPUHealthCheckFailed", gpu="0", status="resolved"),
                                          status="resolved")).encode()
        assert _post(port, flapped)[0] == 202 and _post(port, flapped)[0] == 202  # together: one re-check
        _wait_lines(log, 3, proc)
        assert _post(port, resolved)[0] == 202  # within the firing cooldown, after the first re-check: not dropped
        _wait_lines(log, 4, proc)
        time.sleep(4)  # anything still coming would be a run too many
        runs = sorted(log.read_text().splitlines())
        reports = str(tmp_path / "reports")
        assert runs == sorted(["gpu-b2 GPUXidErrors firing " + reports, "gpu-b3 CoolantLeak firing " + reports,
                               "gpu-b2 GPUHealthCheckFailed resolved " + reports,
                               "gpu-b2 GPUXidErrors resolved " + reports]), runs
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _post_status(port):
    try:
        return _post(port, b"{}")[0]
    except OSError:
        return None


def _wait_lines(log, count, proc, timeout=90):
    deadline = time.monotonic() + timeout
    while not (log.exists() and len(log.read_text().splitlines()) >= count):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.terminate()
            raise AssertionError("%d runs expected; log: %s\n%s" % (
                count, log.read_text() if log.exists() else "none", proc.stdout.read()[-4000:]))
        time.sleep(0.5)
