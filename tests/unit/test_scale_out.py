"""playbooks/scale_out.yml: the plays that change GPU nodes run on the new nodes alone; the load balancer,
Prometheus and the report take them in; a wrong node list stops the run before any play that changes."""
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def playbook(*args):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / 'ansible.cfg'), ANSIBLE_FORCE_COLOR='0',
               PATH='%s:%s' % (BIN, os.environ.get('PATH', '')))
    return subprocess.run([str(BIN / 'ansible-playbook'), '-i', 'inventories/lab', 'playbooks/scale_out.yml', *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def plays(listing):
    """{play name: [hosts]} from --list-hosts."""
    out = {}
    for block in re.split(r'\n(?=  play #\d+)', listing)[1:]:
        name = re.match(r'  play #\d+ \([^)]*\): (.+?)\tTAGS', block).group(1)
        out[name] = sorted(re.findall(r'^      (\S+)$', block, re.M))
    return out


def test_only_the_new_nodes_are_converged_and_the_lb_and_prometheus_take_them_in():
    proc = playbook('--list-hosts', '-e', 'scale_out_hosts=gpu-b3,gpu-a3')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listed = plays(proc.stdout)
    everyone = ['gpu-a1', 'gpu-a2', 'gpu-a3', 'gpu-b1', 'gpu-b2', 'gpu-b3', 'lb-1', 'mon-1']
    assert listed.pop('Preflight the inventory') == everyone  # reads the inventory, changes nothing
    assert listed.pop('Install Prometheus and Alertmanager on the monitoring hosts') == ['mon-1']
    assert listed.pop('Put the healthy runtimes behind the load balancer') == ['lb-1']
    assert listed.pop('Install node_exporter on the other hosts') == []
    assert listed.pop('Check the nodes to add') == listed.pop('Report cluster readiness') == ['localhost']
    assert len(listed) == 7, listed  # baseline, reboot, RDMA, power, GPU agents, runtime, verify
    assert all(hosts == ['gpu-a3', 'gpu-b3'] for hosts in listed.values()), listed


def test_a_node_not_in_the_inventory_stops_the_run_first():
    proc = playbook('-e', 'scale_out_hosts=gpu-b3,gpu-z9')
    assert proc.returncode != 0
    assert 'scale_out_hosts=gpu-b3,gpu-z9' in proc.stdout and 'not there: gpu-z9' in proc.stdout, proc.stdout
    assert 'PLAY [Preflight the inventory]' not in proc.stdout, proc.stdout


def test_no_node_list_names_the_variable():
    proc = playbook()
    assert proc.returncode != 0
    assert 'pass the new nodes, comma-separated (-e scale_out_hosts=gpu-c1,gpu-c2)' in proc.stdout, proc.stdout
