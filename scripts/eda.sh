#!/usr/bin/env bash
# The lab's Event-Driven Ansible service: ansible-rulebook with the remediation rulebook, on the controller.
#   scripts/eda.sh start   render the rulebook (playbooks/eda.yml) and start ansible-rulebook; waits until its
#                          Alertmanager source answers on the lab's management gateway (make lab)
#   scripts/eda.sh stop    stop it (make lab-down)
#   scripts/eda.sh status  exit 0 while it runs
# State under .lab/eda/: the rendered rulebook, rulebook.pid, rulebook.log (every action and playbook run).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv=${VENV:-.venv}
dir=.lab/eda
pidfile=$dir/rulebook.pid
export PATH="$root/$venv/bin:$PATH" ANSIBLE_CONFIG="$root/ansible.cfg" ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

listen() {  # host and port of the rendered rulebook's source
  python3 - "$dir/gpu_remediation.yml" <<'PY'
import sys, yaml
source = yaml.safe_load(open(sys.argv[1]))[0]["sources"][0]
args = next(v for k, v in source.items() if k != "name")
print(args["host"], args["port"])
PY
}

case "${1:-}" in
  start)
    if running; then echo "rulebook already running (pid $(cat "$pidfile"))"; exit 0; fi
    mkdir -p "$dir"
    ansible-playbook playbooks/eda.yml -e eda_rulebook_dest="$root/$dir/gpu_remediation.yml" >"$dir/render.log" 2>&1 \
      || { tail -20 "$dir/render.log" >&2; exit 1; }
    read -r host port < <(listen)
    # -S: the Alertmanager source of this repository (the ansible.eda collection is on Galaxy only).
    nohup ansible-rulebook -r "$dir/gpu_remediation.yml" -i inventories/lab \
      -S extensions/eda/plugins/event_source -v >"$dir/rulebook.log" 2>&1 &
    echo $! >"$pidfile"
    # The source answers an empty notification with 400 once it listens.
    for _ in $(seq 1 90); do
      code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -d '{}' "http://$host:$port/alerts" || true)
      [ "$code" = 400 ] && { echo "rulebook listening on $host:$port (pid $(cat "$pidfile"))"; exit 0; }
      running || break
      sleep 1
    done
    tail -30 "$dir/rulebook.log" >&2
    echo "error: ansible-rulebook did not answer on $host:$port" >&2
    exit 1
    ;;
  stop)
    if running; then
      pid=$(cat "$pidfile")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -9 "$pid" 2>/dev/null || true
      echo "rulebook stopped"
    fi
    rm -f "$pidfile"
    ;;
  status)
    running
    ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
