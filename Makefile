# `make demo`: set up this machine as a one-host cluster and train on it.
# `make test`: every test (lint, unit, training, virtual-cluster integration, Molecule).
PYTHON ?= python3
VENV := .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: demo venv test lint

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements.txt
	touch $@

demo: venv
	ansible-playbook setup.yml
	ansible-playbook train.yml

lint: venv
	ruff check .
	ansible-lint

test: venv
	pytest
