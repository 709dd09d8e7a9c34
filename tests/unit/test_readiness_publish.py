# -*- coding: utf-8 -*-
"""The readiness report outlives its job: run through ansible-runner as AWX runs it, the report role publishes
to a share and to an HTTP endpoint and hands a summary on with set_stats; four slices of the job, merged
by playbooks/merge_readiness.yml, give the report of one unsliced run, byte for byte. Synthetic node results
(inventory host vars) stand in for node_verify's: the lab's integration run proves it with the real verify."""

import http.server
import json
import os
import shutil
import subprocess
import threading

import pytest
import yaml

from conftest import ROOT

BIN = os.path.dirname(os.sys.executable)
NODES = ["gpu-a1", "gpu-a2", "gpu-a3", "gpu-a4", "gpu-b1", "gpu-b2", "gpu-b3"]
BAD = {"gpu-a2": ["ecc: GPU 1 uncorrectable 4"], "gpu-b3": ["xid: GPU 3 Xid 79"]}
COLUMNS = ("topology", "gpus", "ecc", "xid", "pcie", "rdma", "fabric", "nccl", "dcgm")


def node_report(node):
    reasons = BAD.get(node, [])
    row = {"node": node, "rack": "rack_" + node[4], "profile": "hgx-h100-8gpu", "ready": not reasons,
           "verdict": "NOT READY" if reasons else "ready", "reasons": reasons, "gates": {},
           "columns": {c: {"status": "fail" if reasons and c == reasons[0].split(":")[0] else "ok",
                           "reasons": [reasons[0][len(c) + 2:]] if reasons and c == reasons[0].split(":")[0] else []}
                       for c in COLUMNS}}
    return {"row": row, "topology": {"gpus": ["GPU0", "GPU1"], "nics": [], "links": {"GPU0": {"GPU1": "NV18"},
                                                                                     "GPU1": {"GPU0": "NV18"}}}}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("publish")
    hosts = {n: {"node_verify_report": node_report(n), "hardware_profile": "hgx-h100-8gpu"} for n in NODES}
    inventory = {"all": {"vars": {"cluster_name": "gpu-lab"},
                         "children": {"gpu_nodes": {"children": {
                             "rack_a": {"hosts": {n: hosts[n] for n in NODES if n[4] == "a"}},
                             "rack_b": {"hosts": {n: hosts[n] for n in NODES if n[4] == "b"}}}}},
                         "hosts": {"localhost": {"ansible_connection": "local",
                                                 "ansible_python_interpreter": os.sys.executable}}}}
    (tmp / "hosts.yml").write_text(yaml.safe_dump(inventory))
    project = tmp / "project"
    (project / "playbooks").mkdir(parents=True)
    # verify.yml's report play; the node play needs nodes, the inventory above holds its results.
    (project / "playbooks" / "report.yml").write_text(yaml.safe_dump([{
        "name": "Report cluster readiness", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "roles": [{"role": "readiness_report"}]}]))
    with open(os.path.join(ROOT, "playbooks", "merge_readiness.yml")) as f:
        (project / "playbooks" / "merge_readiness.yml").write_text(f.read())
    return tmp


def runner(lab, play, ident, *args):
    """ansible-runner as AWX runs a job: private data dir in, artifacts out. Returns rc, set_stats data, out."""
    pdd = lab / ("pdd-" + ident)
    (pdd / "env").mkdir(parents=True)
    (pdd / "env" / "envvars").write_text(yaml.safe_dump({
        "ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "ANSIBLE_ROLES_PATH": os.path.join(ROOT, "roles"),
        "ANSIBLE_LIBRARY": os.path.join(ROOT, "library"),
        "ANSIBLE_FILTER_PLUGINS": os.path.join(ROOT, "filter_plugins"),
        "ANSIBLE_FORCE_COLOR": "0"}))
    (pdd / "env" / "cmdline").write_text(" ".join(args))
    proc = subprocess.run([os.path.join(BIN, "ansible-runner"), "run", str(pdd), "--project-dir",
                           str(lab / "project"), "-p", "playbooks/" + play, "--inventory", str(lab / "hosts.yml"),
                           "--ident", ident], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"]))
    art = pdd / "artifacts" / ident
    stats = [json.loads(p.read_text()) for p in (art / "job_events").glob("*.json")]
    stats = [e["event_data"].get("artifact_data") for e in stats if e["event"] == "playbook_on_stats"]
    return int((art / "rc").read_text()), (stats[0] if stats else None), proc.stdout + proc.stderr


def slice_args(lab, group, job, hosts, *extra):
    return ("-l", ",".join(hosts + ["localhost"]), "-e", "awx_workflow_job_id=%s" % group,
            "-e", "awx_job_id=%s" % job, "-e", "readiness_report_publish_dir=%s" % (lab / "share"),
            "-e", "readiness_report_dir=%s" % (lab / ("local-%s" % job)), *extra)


def read(d):
    return {p.name: p.read_text() for p in sorted(d.iterdir())}


def test_four_slices_merged_give_the_unsliced_report(lab):
    rc, stats, out = runner(lab, "report.yml", "whole", *slice_args(lab, 50, 50, NODES))
    assert rc == 2, out[-3000:]  # two nodes are not ready: the report's gate fails the job
    whole = lab / "share" / "gpu-lab" / "50" / "50"
    assert sorted(read(whole)) == sorted(["readiness.json", "readiness.md"] + [n + ".json" for n in NODES])
    assert read(whole) == read(lab / "local-50")
    assert stats == {"readiness_run_group": "50", "readiness_run_limit": ",".join(NODES + ["localhost"]),
                     "readiness_report": {
        "cluster": "gpu-lab", "run_group": "50", "run_id": "50", "nodes": 7, "not_ready": ["gpu-a2", "gpu-b3"],
        "published": [str(whole)]}}, stats

    for i in range(4):  # AWX's split: host i to slice i % 4
        rc, stats, out = runner(lab, "report.yml", "slice%d" % i, *slice_args(lab, 99, 100 + i, NODES[i::4]))
        assert rc == (2 if set(NODES[i::4]) & set(BAD) else 0), out[-3000:]
        assert stats["readiness_run_group"] == "99" and stats["readiness_report"]["nodes"] == len(NODES[i::4])
    rc, stats, out = runner(lab, "merge_readiness.yml", "merge", "-e", "readiness_run_group=99",
                            "-e", "readiness_report_publish_dir=%s" % (lab / "share"),
                            "-e", "readiness_report_dir=%s" % (lab / "local-merged"))
    assert rc == 2 and "not ready: gpu-a2, gpu-b3" in out, out[-3000:]
    merged = lab / "share" / "gpu-lab" / "99" / "merged"
    assert read(merged) == read(whole)
    assert stats["readiness_report"] == {"cluster": "gpu-lab", "run_group": "99", "run_id": "merged", "nodes": 7,
                                         "not_ready": ["gpu-a2", "gpu-b3"], "published": [str(merged)]}, stats


def test_a_lost_slice_leaves_its_nodes_not_ready_and_a_double_report_fails(lab):
    """Group 77: the slices of group 99 (the test above) but slice 101's, which never published."""
    share = lab / "share" / "gpu-lab"
    shutil.copytree(share / "99", share / "77", ignore=lambda d, names: [n for n in names if n in ("101", "merged")])
    merge = ("-e", "readiness_run_group=77", "-e", "readiness_report_publish_dir=%s" % (lab / "share"),
             "-e", "readiness_report_dir=%s" % (lab / "local-lost"))
    rc, stats, out = runner(lab, "merge_readiness.yml", "merge-lost", *merge)
    report = json.loads((share / "77" / "merged" / "readiness.json").read_text())
    assert rc == 2 and report["ready"] == ["gpu-a1", "gpu-a3", "gpu-a4", "gpu-b1"], (report["ready"], out[-2000:])
    assert report["not_ready"] == ["gpu-a2", "gpu-b2", "gpu-b3"] and stats["readiness_report"]["nodes"] == 7
    lost = {r["node"]: r for r in report["nodes"]}["gpu-b2"]
    assert lost["rack"] == "rack_b" and "no slice reported it" in lost["reasons"][0], lost
    # slice 100 published twice, under another job id: gpu-a1 is in two reports
    shutil.copytree(share / "77" / "100", share / "77" / "300")
    rc, stats, out = runner(lab, "merge_readiness.yml", "merge-twice", *merge)
    assert rc == 2 and "node gpu-a1 is in two slice reports" in out and "77/300/readiness.json" in out, out[-2000:]


def test_merge_without_a_group_names_what_it_needs(lab):
    rc, _, out = runner(lab, "merge_readiness.yml", "merge-none", "-e", "readiness_report_publish_dir=%s" % lab)
    assert rc == 2 and "missing required arguments: readiness_run_group" in out, out[-2000:]


class Store(http.server.BaseHTTPRequestHandler):
    store = {}

    def do_PUT(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        ok = self.headers.get("Authorization") == "Bearer s3cret"
        if ok:
            self.store[self.path] = body.decode()
        self.send_response(204 if ok else 401)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_report_is_uploaded_with_the_credential_and_the_token_is_not_logged(lab):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Store)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d/reports/" % httpd.server_address[1]
    try:
        (lab / "headers.yml").write_text(yaml.safe_dump({"readiness_report_publish_headers":
                                                         {"Authorization": "Bearer s3cret"}}))
        rc, stats, out = runner(lab, "report.yml", "upload", "-l", "gpu-a1,gpu-a3,localhost",
                                "-e", "awx_job_id=400", "-e", "readiness_report_publish_url=%s" % url,
                                "-e", "@%s" % (lab / "headers.yml"), "-e", "readiness_report_dir=%s" % (lab / "up"))
        assert rc == 0, out[-3000:]
        assert sorted(Store.store) == ["/reports/gpu-lab/400/400/%s" % f for f in
                                       ("gpu-a1.json", "gpu-a3.json", "readiness.json", "readiness.md")]
        assert Store.store["/reports/gpu-lab/400/400/readiness.json"] == (lab / "up" / "readiness.json").read_text()
        assert stats["readiness_report"]["published"] == [url.rstrip("/") + "/gpu-lab/400/400"]
        assert "s3cret" not in out
        (lab / "headers.yml").write_text(yaml.safe_dump({"readiness_report_publish_headers": {}}))
        rc, _, out = runner(lab, "report.yml", "upload-denied", "-l", "gpu-a1,localhost", "-e", "awx_job_id=401",
                            "-e", "readiness_report_publish_url=%s" % url, "-e", "@%s" % (lab / "headers.yml"),
                            "-e", "readiness_report_dir=%s" % (lab / "up2"))
        assert rc == 2 and "Upload the report" in out, out[-3000:]
    finally:
        httpd.shutdown()
        httpd.server_close()
