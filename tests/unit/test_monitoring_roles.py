"""The monitoring roles' documentation matches their code: every default is in meta/argument_specs.yml
with the same literal default, and the README's variable table lists exactly the spec's options."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import role_docs

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
MONITORING_ROLES = ("node_exporter", "dcgm_exporter", "prometheus", "alertmanager", "bmc_exporter")


@pytest.mark.parametrize("role", MONITORING_ROLES)
def test_every_default_is_specified_with_its_value(role):
    role_docs.assert_defaults_specified(role)


@pytest.mark.parametrize("role", MONITORING_ROLES)
def test_readme_table_lists_the_spec(role):
    role_docs.assert_readme_lists(role, role_docs.spec(role))


# (role, variables, what the message must say after "localhost: ")
BAD_INPUT = [
    ("node_exporter", {"node_exporter_port": 70000}, "node_exporter_port=70000 is not a TCP port"),
    ("node_exporter", {"node_exporter_gpu_health_enabled": True, "hardware_profile": "hgx-x999",
                       "hardware_profiles": {}}, "hardware_profile=hgx-x999 is not a key of hardware_profiles"),
    ("node_exporter", {"node_exporter_gpu_health_enabled": True, "node_exporter_gpu_health_expected": {"gpu_count": 8},
                       "node_exporter_gpu_health_interval": "every minute"},
     "node_exporter_gpu_health_interval=every minute is not a systemd time span"),
    ("node_exporter", {"node_exporter_rdma_counters": ["np_cnp_sent", "np cnp"]},
     "node_exporter_rdma_counters: ['np cnp'] are not hw_counters file names"),
    ("node_exporter", {"node_exporter_rdma_counters_interval": "30 sec"},
     "node_exporter_rdma_counters_interval=30 sec is not a systemd time span"),
    ("dcgm_exporter", {"dcgm_exporter_image": "nvcr.io/nvidia/k8s/dcgm-exporter:latest"},
     "dcgm_exporter_image=nvcr.io/nvidia/k8s/dcgm-exporter:latest is not pinned"),
    ("dcgm_exporter", {"dcgm_exporter_extra_counters": [["DCGM_FI_DEV_FAN_SPEED", "gauge"]]},
     "dcgm_exporter_extra_counters: every entry is [DCGM field, gauge|counter, help]"),
    ("alertmanager", {"alertmanager_critical_receiver": "pager"},
     "alertmanager_critical_receiver=pager is not in alertmanager_receivers"),
    ("alertmanager", {"alertmanager_group_wait": "30 seconds"}, "alertmanager_group_wait is not a duration"),
    ("bmc_exporter", {"bmc_exporter_timeout": 30}, "bmc_exporter_timeout=30 must be at least 1 and below"),
    ("bmc_exporter", {"bmc_exporter_hosts": ["localhost"], "bmc_power_address": "198.18.0.21", "bmc_password": ""},
     "bmc_exporter_username/bmc_exporter_password are empty but 1 nodes set bmc_power_address"),
    ("alertmanager", {"alertmanager_page_receiver": "oncall"},
     "alertmanager_page_receiver=oncall is not in alertmanager_receivers"),
    ("alertmanager", {"alertmanager_eda_url": "controller:5000/alerts"},
     "alertmanager_eda_url=controller:5000/alerts is not an http(s) URL"),
    ("alertmanager", {"alertmanager_eda_url": "http://c:5000/alerts",
                      "alertmanager_receivers": [{"name": "default"}, {"name": "critical"}, {"name": "page"},
                                                 {"name": "eda"}]},
     'alertmanager_receivers: "eda" is the Event-Driven Ansible receiver'),
    ("prometheus", {"prometheus_alert_packet_loss_ratio": 1.5}, "prometheus_alert_packet_loss_ratio=1.5 is not a ratio"),
    ("prometheus", {"prometheus_dcgm_exporter_hosts": ["gpu-z9"]},
     "prometheus_dcgm_exporter_hosts names hosts outside the inventory: gpu-z9"),
]


@pytest.mark.parametrize("role,variables,message", BAD_INPUT,
                         ids=["%s-%s" % (r, "-".join(v)) for r, v, _ in BAD_INPUT])
def test_bad_input_is_rejected_naming_host_and_variable(tmp_path, role, variables, message):
    """The role's first task stops the play, in check mode on the controller, before anything else runs."""
    play = tmp_path / "play.yml"
    play.write_text(json.dumps([{"name": "Apply %s" % role, "hosts": "localhost", "connection": "local",
                                 "gather_facts": False, "roles": [role]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_ROLES_PATH=str(ROLES))
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "--check",
                           str(play), "-e", json.dumps(variables)], cwd=str(REPO), env=env, check=False,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "localhost: " + message in proc.stdout.replace("\n", " "), proc.stdout[-3000:]
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", proc.stdout), proc.stdout[-1500:]


def test_the_health_timer_carries_every_module_util_its_code_imports():
    """The timer runs the gpu_health check code from copies of module_utils: the list must hold every file
    those files import (a missing one breaks the timer on the node, not here)."""
    import re
    import yaml
    root = os.path.join(os.path.dirname(__file__), '..', '..')
    with open(os.path.join(root, 'roles', 'node_exporter', 'vars', 'main.yml')) as handle:
        listed = yaml.safe_load(handle)['_node_exporter_gpu_health_module_utils']
    with open(os.path.join(root, 'roles', 'node_exporter', 'templates', 'gpu-health-textfile.py.j2')) as handle:
        needed = set(re.findall(r'from ansible\.module_utils\.(\w+) import', handle.read()))
    seen = set()
    while needed - seen:
        name = (needed - seen).pop()
        seen.add(name)
        with open(os.path.join(root, 'module_utils', name + '.py')) as handle:
            needed |= set(re.findall(r'from ansible\.module_utils\.(\w+) import', handle.read())) - {'basic'}
    assert sorted(n + '.py' for n in seen) == sorted(listed)
