"""Run roles/preflight against every inventory in tests/bad_inventories.

`good` is a valid inventory; every other case is `good` with one mistake, its inventory.diff (a unified diff
that `git apply` puts over a copy of good). Each bad case must fail before anything changes: non-zero exit,
every line of its expected_error.txt in the output, no host reaching the second play (its marker file absent,
changed=0 everywhere), and no secret value in the output. A case whose expected_error.txt starts with
"[ERROR]" is refused by Ansible itself (ansible.cfg: an inventory that does not parse, a duplicate YAML key)
before the preflight play starts. The `good` case must pass and reach the second play.

The runs are started together once per session (each is a separate ansible-playbook process) and
the tests then check their results, so the suite takes about as long as its slowest few runs.
"""

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CASES_DIR = REPO / "tests" / "bad_inventories"
PLAYBOOK = REPO / "tests" / "integration" / "preflight.yml"
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
# Values the fixture inventories give their secrets; none may ever be printed.
SECRET_VALUES = ("preflight-user-S3CRETU5ER", "preflight-pass-S3CRETVALUE", "S3CRET")
BAD_CASES = sorted(p.name for p in CASES_DIR.iterdir() if (p / "expected_error.txt").is_file())
RECAP_LINE = re.compile(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", re.M)


def inventory(case, tmp_dir):
    """The case's inventory: good itself, or a copy of good with the case's diff applied."""
    if case == "good":
        return CASES_DIR / "good"
    target = Path(tmp_dir) / case
    shutil.copytree(CASES_DIR / "good", target)
    subprocess.run(["git", "apply", "-p1", str(CASES_DIR / case / "inventory.diff")], cwd=target, check=True,
                   capture_output=True)
    return target


def _run(case, tmp_dir):
    marker = Path(tmp_dir) / ("%s.marker" % case)
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_FILTER_PLUGINS": str(REPO / "filter_plugins"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
    })
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-v", "--vault-password-file", str(CASES_DIR / "vault-password"),
         "-i", str(inventory(case, tmp_dir)), str(PLAYBOOK),
         "-e", "preflight_test_marker=%s" % marker],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return {"rc": proc.returncode, "out": proc.stdout + proc.stderr, "marker": marker}


@pytest.fixture(scope="session")
def results(tmp_path_factory):
    tmp_dir = tmp_path_factory.mktemp("preflight")
    cases = BAD_CASES + ["good"]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        runs = dict(zip(cases, pool.map(lambda c: _run(c, tmp_dir), cases)))
    return runs


def _recap(out):
    return {host: (int(changed), int(failed)) for host, changed, failed in RECAP_LINE.findall(out)}


def _assert_no_secret(out):
    for value in SECRET_VALUES:
        assert value not in out, "a secret value appears in the output"


def test_corpus_is_large_enough():
    assert len(BAD_CASES) >= 30


@pytest.mark.parametrize("case", BAD_CASES)
def test_each_case_is_good_with_one_change(case):
    """A case holds only its diff over good and its expected error, and the diff is small."""
    files = sorted(p.name for p in (CASES_DIR / case).iterdir())
    assert files == ["expected_error.txt", "inventory.diff"], files
    changed = [line for line in (CASES_DIR / case / "inventory.diff").read_text().splitlines()
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert 0 < len(changed) <= 40, changed


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_inventory_fails_before_any_change(case, results):
    res = results[case]
    out = res["out"]
    expected = [line for line in (CASES_DIR / case / "expected_error.txt").read_text().splitlines() if line]
    assert expected, "expected_error.txt is empty"
    assert res["rc"] != 0, out[-3000:]
    for line in expected:
        assert line in out, "%r not in output:\n%s" % (line, out[-3000:])
    assert not res["marker"].exists(), "the second play ran"
    recap = _recap(out)
    if expected[0].startswith("[ERROR]"):  # refused by Ansible before any play ran a task
        assert recap == {} and "TASK [" not in out, out[-3000:]
        _assert_no_secret(out)
        return
    assert "Preflight found" in out
    assert recap, out[-3000:]
    assert "localhost" not in recap, "the second play ran"
    assert all(changed == 0 for changed, _ in recap.values()), recap
    # One failure, the controller's, for the whole run: the list whole and first in the failure summary, one
    # Origin, and no host pointing at another for it.
    assert out.count("fatal: [") == 1 and " -> localhost]: FAILED!" in out, out[-3000:]
    assert out.count("Origin:") == 1 and "the list is in the failure of" not in out, out[-3000:]
    summary = out[out.index("FAILED HOSTS (1)"):]
    first = summary.splitlines()[1]
    assert first.endswith("which runs once for every host of the play, so none of them went on:"), first
    for line in expected:
        assert line in summary, "%r not whole in the failure summary:\n%s" % (line, summary[:3000])
    _assert_no_secret(out)


def test_good_inventory_passes(results):
    res = results["good"]
    out = res["out"]
    assert res["rc"] == 0, out[-3000:]
    assert "Preflight found" not in out
    # a line per check family, with what it read
    for line in ("Preflight passed on 8 hosts:", "host names: 8 hosts", "management addresses: 8 hosts",
                 "GPU nodes: 6, each with a node_index, a known hardware_profile and one rack of 2",
                 "RoCE rails: 2 rails for 6 GPU nodes", "node plans: 6 GPU nodes", "role arguments: "):
        assert line in out, "%r not in:\n%s" % (line, out[-3000:])
    # the arguments of the preflight role are validated once, not once per host
    assert len(re.findall(r"^ok: \[[^]]+\]", out[out.index("Validating arguments"):].split("TASK [")[1],
                          re.M)) == 1
    assert res["marker"].exists()
    recap = _recap(out)
    assert recap.get("localhost") == (1, 0), recap
    assert all(failed == 0 for _, failed in recap.values()), recap
    _assert_no_secret(out)
