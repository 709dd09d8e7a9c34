# Two commands do everything: `make lab` (bring up the lab and provision it) and `make test`
# (everything CI runs). Both set the machine up first (venv, Docker engine, node image).
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)
export ANSIBLE_CONFIG := $(abspath ansible.cfg)
export ANSIBLE_FORCE_COLOR ?= 0
export PY_COLORS ?= 0
# Where make test records its stage times, per-test times (JUnit) and every task's time (task_timings callback).
export GPULAB_TIMES_DIR ?= $(abspath .cache/times)
export GPULAB_TASK_TIMES ?= $(GPULAB_TIMES_DIR)/tasks.jsonl
LAB_VAULT := --vault-password-file .lab/vault-pass -e @.lab/secrets.vault.yml
# The lab's plays run under Mitogen's mitogen_linear strategy (requirements.txt; LAB_MITOGEN=0 runs them with
# Ansible's own): on the converged lab a site.yml re-run took 176 CPU-s instead of 328, the nodes' share 72
# instead of 213 (one Python per node instead of one per task). Operators opt in the same way (README, "Speed").
LAB_MITOGEN ?= 1
export LAB_MITOGEN
LAB_ENV := $(if $(filter 1,$(LAB_MITOGEN)),ANSIBLE_STRATEGY=mitogen_linear ANSIBLE_STRATEGY_PLUGINS=$$($(BIN)/python \
	-c 'import ansible_mitogen.plugins.strategy as s, os; print(os.path.dirname(s.__file__))'),)
PLAYBOOK := $(LAB_ENV) $(BIN)/ansible-playbook $(LAB_VAULT)

.PHONY: help setup image lab lab-up lab-down lab-clean lint yamllint ansible-lint unit molecule integration \
	integration-inventories integration-lab test bench

help:
	@echo "make lab        bring up the lab (containers, simulator) and run site.yml"
	@echo "make test       lint, unit tests, Molecule, integration (what CI runs)"
	@echo "make bench      module calls against ping; site/verify on 4, 8, 16 nodes; SSH vs docker exec"
	@echo "make lab-down   remove every container, network and key the lab created"

setup:
	@scripts/ensure-host.sh

image: setup
	@LAB_IMAGE=$$(lab/image/fresh.sh) && echo "node image: $$LAB_IMAGE (lists emptied now, from $$(lab/image/build.sh))"

lab-up: setup
	@echo "lab node image: $$(lab/image/fresh.sh --keep gpulab-node:lab)"
	@scripts/lab-secrets.sh
	$(PLAYBOOK) playbooks/lab/up.yml
	$(PLAYBOOK) playbooks/lab/simulator.yml
	$(PLAYBOOK) playbooks/lab/apt_repo.yml
	$(PLAYBOOK) playbooks/lab/bmc.yml
	$(PLAYBOOK) playbooks/lab/models.yml
	@$(LAB_ENV) scripts/eda.sh start

lab: lab-up
	$(PLAYBOOK) playbooks/site.yml

lab-down:
	@scripts/lab-down.sh

lab-clean: setup
	@scripts/lab-clean.sh

lint: yamllint ansible-lint

yamllint: setup
	@scripts/stage.sh yamllint $(BIN)/yamllint -s .

ansible-lint: setup
	@scripts/stage.sh ansible-lint $(BIN)/ansible-lint --profile production

unit: setup
	@scripts/stage.sh unit $(BIN)/pytest -q tests/unit --junitxml=$(GPULAB_TIMES_DIR)/unit.xml

molecule: setup
	@scripts/stage.sh molecule scripts/molecule-all.sh

integration: integration-inventories integration-lab

# Broken inventories through the preflight play; inventories/example and its 1,000-node variant through preflight and
# the plan command (no lab needed).
integration-inventories: setup
	@scripts/stage.sh integration-inventories $(BIN)/pytest -q -p no:cacheprovider \
	  tests/integration/test_bad_inventories.py tests/integration/test_example_inventory.py \
	  --junitxml=$(GPULAB_TIMES_DIR)/integration-inventories.xml

# The lab end to end: brought up, converged, faulted, remediated, scaled out, removed. It starts from no lab: one
# that make lab left running goes first (its nodes are converged, and the first test proves a fresh site).
integration-lab: setup
	@scripts/lab-down.sh >/dev/null
	@scripts/stage.sh integration-lab $(BIN)/pytest -q -p no:cacheprovider tests/integration/test_lab.py \
	  --junitxml=$(GPULAB_TIMES_DIR)/integration-lab.xml

# Everything CI runs, in three lanes (scripts/test-lanes.sh): the lab's integration run in one from the start;
# lint, unit, the broken inventories and the Molecule scenarios (longest first) in the others as they free.
# Each stage prints its wall time; after the first failure nothing new starts. Ends with where the time went,
# every stage and lab test beside its budget (scripts/time-report.py, tests/budgets.yml).
test: setup
	@rm -rf $(GPULAB_TIMES_DIR)
	@scripts/stage.sh total scripts/test-lanes.sh; rc=$$?; \
	  $(BIN)/python scripts/time-report.py $(GPULAB_TIMES_DIR); exit $$rc

bench: lab
	@VENV=$(VENV) scripts/bench.sh
