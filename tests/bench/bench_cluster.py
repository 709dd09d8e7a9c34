#!/usr/bin/env python3
"""make bench: the converged re-run of site.yml, and verify.yml, on 4, 8 and 16 bench nodes; time per
node-task and its growth against the smallest run; then SSH against the docker exec connection. SSH goes
to each node's sshd published on the controller's loopback; ansible_host stays the management address.

The bench nodes are copies of the lab's converged nodes: gpu-a1, lb-1 and mon-1 are committed as images
and started as bench-n01.., bench-lb and bench-mon (198.18.0.101.. on the lab's networks) from a
generated inventory under .lab/bench/ that uses the lab's group_vars. Each size is converged once
(untimed: the new copies take their own names, addresses and LB/Prometheus membership), then timed.
A timed site.yml re-run that changes anything fails the benchmark. Needs the lab, converged (make lab).

The Ansible floor: right after each timed site.yml re-run, a generated playbook runs on the same hosts, over
the same connection, as many no-op ansible.builtin.stat tasks as site.yml executed on each (its recap's ok and
failed; skipped tasks are not executed); site.yml's time per executed node-task is printed as a ratio of the
floor's (goal 1.5x). The sizes' smallest is timed once more under Mitogen's mitogen_linear strategy
(requirements.txt), against the default strategy in the same run.

BENCH_SIZES="4 8 16" and BENCH_CONNECTION_NODES=4 choose the sizes; the bench containers stay until
make lab-down.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
BENCH = ROOT / ".lab" / "bench"
VAULT = ["--vault-password-file", ".lab/vault-pass", "-e", "@.lab/secrets.vault.yml"]
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+"
                   r"skipped=(\d+)\s+rescued=(\d+)\s+ignored=(\d+)", re.M)
# Copies of these lab hosts; one rack per 8 nodes, each node's even share of its rack as in rack_a (the floor
# preflight holds an hgx-h100-8gpu node to: 8 x 700 W + non_gpu_watts 4600 W).
SOURCES = {"gpu": "gpu-a1", "lb": "lb-1", "mon": "mon-1"}
NODES_PER_RACK = 8
NODE_CAP_WATTS = 10200
# A bench host reached over SSH has its sshd on 127.0.0.1:(this + last octet of its address).
SSH_PORT_BASE = 22000
SIZES = sorted(int(s) for s in os.environ.get("BENCH_SIZES", "4 8 16").split())


import ansible_mitogen  # noqa: E402 - requirements.txt
MITOGEN_STRATEGY = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"


def docker(*args):
    return subprocess.run(["docker"] + list(args), capture_output=True, text=True, check=True).stdout


def env(mitogen=False):
    e = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
             PATH="%s:%s" % (BIN, os.environ.get("PATH", "")))
    if mitogen:
        e.update(ANSIBLE_STRATEGY="mitogen_linear", ANSIBLE_STRATEGY_PLUGINS=str(MITOGEN_STRATEGY))
    return e


def inventory(size, connection="ssh"):
    """A whole cluster of `size` GPU nodes, one LB and one monitoring host, in the lab's layout."""
    def host(name, address, image, **extra):
        # ansible_host stays the management address: it is what the roles put in the LB upstream, the
        # Prometheus targets and the preflight checks. The transport goes elsewhere.
        vars_ = {"ansible_host": address, "lab_node_image": image}
        if connection == "docker":
            # Pipelined like SSH (ansible.cfg sets pipelining for [ssh_connection] only).
            vars_.update(ansible_connection="community.docker.docker", ansible_docker_host="gpulab-" + name,
                         ansible_pipelining=True)
        else:
            # sshd published on the controller's loopback (docker-proxy), ssh told to connect there.
            port = SSH_PORT_BASE + int(address.rsplit(".", 1)[1])
            vars_.update(lab_ssh_published_port=port, ansible_port=port,
                         ansible_ssh_extra_args="-o HostName=127.0.0.1")
        vars_.update(extra)
        return vars_

    racks = {}
    for i in range(size):
        rack = "rack_bench%d" % (i // NODES_PER_RACK + 1)
        name = "bench-n%02d" % (i + 1)
        racks.setdefault(rack, {"hosts": {}, "vars": {}})["hosts"][name] = host(
            name, "198.18.0.%d" % (101 + i), "gpulab-bench-gpu:latest",
            node_index=10 + i, hardware_profile="hgx-h100-8gpu")
    for rack in racks.values():
        rack["vars"]["rack_power_budget_watts"] = NODE_CAP_WATTS * len(rack["hosts"])
    data = {"all": {"children": {
        "gpu_nodes": {"children": racks},
        "lb": {"hosts": {"bench-lb": host("bench-lb", "198.18.0.131", "gpulab-bench-lb:latest")}},
        "monitoring": {"hosts": {"bench-mon": host("bench-mon", "198.18.0.141", "gpulab-bench-mon:latest")}},
    }}}
    # Two levels below the repository, like inventories/lab, whose group_vars it shares.
    path = BENCH / ("hosts-%d-%s.yml" % (size, connection))
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def playbook(path, inv, *extra, mitogen=False, strict=True):
    book = path if Path(path).is_absolute() else ROOT / "playbooks" / path
    cmd = [str(BIN / "ansible-playbook")] + VAULT + ["-i", str(inv), "-e",
                                                     "readiness_report_dir=%s" % (BENCH / "reports"), str(book)]
    print("  %s on %s%s" % (Path(path).name, inv.name, " (mitogen)" if mitogen else ""), file=sys.stderr, flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd + list(extra), cwd=ROOT, env=env(mitogen), capture_output=True, text=True)
    wall = time.perf_counter() - start
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        if not strict:
            return None, "%s exited %d: %s" % (Path(path).name, proc.returncode, out.strip().splitlines()[-1:])
        sys.exit("%s on %s exited %d:\n%s" % (path, inv.name, proc.returncode, out[-4000:]))
    recap = {m.group(1): [int(g) for g in m.groups()[1:]] for m in RECAP.finditer(out)}
    return wall, recap


def node_tasks(recap):
    # ok counts the changed ones too; every other result is a task that ran on a host as well.
    return sum(ok + unreachable + failed + skipped for ok, _, unreachable, failed, skipped, _, _ in recap.values())


def executed(recap):
    """Tasks that ran a module on each host: ok (changed included) and failed, not skipped."""
    return {h: ok + failed for h, (ok, _, _, failed, _, _, _) in recap.items()}


def floor(inv, size, site, *extra, mitogen=False):
    """The same hosts, the same connection, one no-op stat task per task site.yml executed on each."""
    plays = {}
    for host, count in sorted(executed(site).items()):
        plays.setdefault(count, []).append(host)
    book = BENCH / ("floor-%d.yml" % size)
    book.write_text(yaml.safe_dump([{"name": "Floor: %d no-op tasks" % count, "hosts": ",".join(hosts),
                                     "gather_facts": False, "become": False,
                                     "tasks": [{"name": "stat %d" % i, "ansible.builtin.stat": {"path": "/"}}
                                               for i in range(count)]}
                                    for count, hosts in sorted(plays.items()) if count], sort_keys=False))
    wall, recap = playbook(book, inv, *extra, mitogen=mitogen, strict=not mitogen)
    if wall is None:
        return None, recap
    if executed(recap) != {h: n for h, n in executed(site).items() if n}:
        sys.exit("the floor on %d nodes ran %s node-tasks, site.yml %s" % (size, executed(recap), executed(site)))
    return wall, sum(executed(recap).values())


def timed(inv, size, *extra, mitogen=False):
    """site.yml re-run, its floor, verify.yml: {play: (wall, node-tasks)}; under Mitogen a failure or a change
    is reported, not fatal."""
    out = {}
    site_wall, site = playbook("site.yml", inv, *extra, mitogen=mitogen, strict=not mitogen)
    if site_wall is None:
        return {"error": site}
    changed = {h: r[1] for h, r in site.items() if r[1]}
    if changed:
        if not mitogen:
            sys.exit("the converged re-run of site.yml on %d nodes changed %s" % (size, changed))
        out["error"] = "the converged re-run of site.yml changed %s" % changed
    out["site"] = (site_wall, node_tasks(site))
    out["site_executed"] = (site_wall, sum(executed(site).values()))
    out["floor"] = floor(inv, size, site, *extra, mitogen=mitogen)
    verify_wall, verify = playbook("verify.yml", inv, *extra, mitogen=mitogen, strict=not mitogen)
    if verify_wall is None:
        out["error"] = verify
        return out
    out["verify"] = (verify_wall, node_tasks(verify))
    print("  %s: site %.1f s for %d node-tasks, floor %s, verify %.1f s for %d"
          % (inv.name, site_wall, node_tasks(site), out["floor"], verify_wall, node_tasks(verify)),
          file=sys.stderr, flush=True)
    return out


def prepare():
    # scripts/ensure-host.sh (make setup) raised fs.inotify.max_user_instances for this many systemd containers.
    for role, source in SOURCES.items():
        if docker("ps", "-q", "--filter", "name=^gpulab-%s$" % source) == "":
            sys.exit("gpulab-%s is not running: bring the lab up and converge it first (make lab)" % source)
        # Once: a new image would make up.yml recreate every bench node (make lab-clean removes it).
        if not docker("image", "ls", "-q", "gpulab-bench-%s:latest" % role):
            docker("commit", "gpulab-" + source, "gpulab-bench-%s:latest" % role)
    BENCH.mkdir(parents=True, exist_ok=True)
    link = BENCH / "group_vars"
    if not link.exists():
        link.symlink_to(ROOT / "inventories" / "lab" / "group_vars")


def bring_up(inv, size):
    playbook("lab/up.yml", inv)
    hosts = yaml.safe_load(subprocess.run([str(BIN / "ansible-inventory"), "-i", str(inv), "--list"], cwd=ROOT,
                                          env=env(), capture_output=True, text=True, check=True).stdout)
    for name, hv in hosts["_meta"]["hostvars"].items():
        published = docker("port", "gpulab-" + name, "22/tcp").split()
        if published != ["127.0.0.1:%d" % hv["ansible_port"]]:
            sys.exit("gpulab-%s publishes sshd on %s, not on 127.0.0.1:%d" % (name, published, hv["ansible_port"]))
    for i in range(size):
        # Once per copy (the marker is not in the image): a copy's BMC certificate names gpu-a1's address,
        # and bmc.yml makes one for the copy's own; dockerd renames runtimes/ at start, which overlayfs
        # refuses for a directory of the image, so its state directory goes (a copy runs no containers).
        docker("exec", "gpulab-bench-n%02d" % (i + 1), "sh", "-c",
               "test -e /etc/gpulab-bench-copy && exit 0; systemctl stop docker.socket docker; "
               "rm -rf /etc/labbmc/bmc.crt /etc/labbmc/bmc.key /var/lib/docker; systemctl reset-failed; "
               "touch /etc/gpulab-bench-copy")
    for play in ("simulator.yml", "apt_repo.yml", "bmc.yml", "models.yml"):
        playbook("lab/" + play, inv)
    playbook("site.yml", inv)  # the copies take their own identity: untimed


def main():
    sizes = SIZES
    conn_size = int(os.environ.get("BENCH_CONNECTION_NODES", str(sizes[0])))
    prepare()
    results = {}
    for size in sizes:
        inv = inventory(size)
        bring_up(inv, size)
        results[size] = timed(inv, size)
        if size == conn_size:
            ssh = results[size]
            docker_results = timed(inventory(size, "docker"), size)
            # Mitogen's interpreter discovery fails its first connection under ansible-core 2.19 ("EOF on
            # stream"): both sides of this pair name the nodes' interpreter.
            named = ("-e", "ansible_python_interpreter=/usr/bin/python3")
            default_named = timed(inv, size, *named)
            mitogen = timed(inv, size, *named, mitogen=True)
    base = sizes[0]
    print("converged site.yml re-run and verify.yml, N bench GPU nodes + LB + monitoring host, "
          "over SSH to loopback-published ports")
    print("  %5s  %-6s  %8s  %10s  %12s  %s" % ("nodes", "play", "wall s", "node-tasks", "ms/node-task",
                                               "growth per node-task vs %d nodes (goal for verify: 1.2x)" % base))
    for play in ("site", "verify"):
        b_wall, b_tasks = results[base][play]
        for size in sizes:
            wall, tasks = results[size][play]
            print("  %5d  %-6s  %8.1f  %10d  %12.1f  %.2fx (wall %.2fx for %.1fx the nodes)"
                  % (size, play, wall, tasks, 1000 * wall / tasks, (wall / tasks) / (b_wall / b_tasks),
                     wall / b_wall, size / base))
    print("site.yml re-run against the Ansible floor (as many no-op stat tasks per host, same hosts and "
          "connection): time per executed node-task, goal 1.5x")
    for size in sizes:
        (s_wall, s_tasks), (f_wall, f_tasks) = results[size]["site_executed"], results[size]["floor"]
        print("  %5d nodes  site %7.1f s / %d  floor %7.1f s / %d  %.2fx"
              % (size, s_wall, s_tasks, f_wall, f_tasks, (s_wall / s_tasks) / (f_wall / f_tasks)))
    print("connection on %d nodes: docker exec time as a ratio of SSH on loopback-published ports (same tasks, "
          "both pipelined)" % conn_size)
    for play in ("site", "verify"):
        (s_wall, s_tasks), (d_wall, d_tasks) = ssh[play], docker_results[play]
        print("  %-6s  ssh %7.1f s  docker exec %7.1f s  %.2fx  (node-tasks %d / %d)"
              % (play, s_wall, d_wall, d_wall / s_wall, s_tasks, d_tasks))
    print("mitogen_linear against the default strategy on %d nodes over SSH, in the same run "
          "(ratio < 1: Mitogen faster)" % conn_size)
    if "error" in mitogen:
        print("  mitogen: %s" % mitogen["error"])
    for play in ("site", "floor", "verify"):
        if play in mitogen and mitogen[play][0] is not None:
            (d_wall, d_tasks), (m_wall, m_tasks) = default_named[play], mitogen[play]
            print("  %-6s  linear %7.1f s  mitogen_linear %7.1f s  %.2fx  (node-tasks %d / %d)"
                  % (play, d_wall, m_wall, m_wall / d_wall, d_tasks, m_tasks))


if __name__ == "__main__":
    main()
