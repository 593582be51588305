# `make demo`: set up this machine as a one-host cluster and train on it.
# `make test`: every test (lint, unit, training, virtual-cluster integration, Molecule).
# `make check`: the inner loop, under 3 minutes: lint, unit and train/ tests but the slow ones.
# `make lock`: re-resolve requirements.txt into requirements.lock (newest allowed versions).
PYTHON ?= python3
VENV := .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: demo venv lock collections test check lint

venv: $(VENV)/.installed

# Exactly the locked versions; pip checks every file against the lock's hashes.
$(VENV)/.installed: requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --require-hashes -r requirements.lock
	touch $@

# One lock for the controller and every host, macOS and Linux alike (uv's universal resolution,
# one version of each package for Python 3.11 and later).
lock: venv
	uv pip compile requirements.txt --universal --generate-hashes --python-version 3.11 \
	  --fork-strategy fewest --upgrade --custom-compile-command "make lock" -o requirements.lock

# The pinned collections of requirements.yml into ./collections (needs galaxy.ansible.com).
collections: venv
	ansible-galaxy collection install -r requirements.yml -p collections

demo: venv
	ansible-playbook setup.yml
	ansible-playbook train.yml

lint: venv
	ruff check .
	ansible-lint

# Two workers: the train cluster's tests in turn on one, the other clusters' on the other, the
# in-process tests where a worker is free (tests/conftest.py).
test: venv
	pytest -n 2 --dist loadgroup

check: lint
	pytest -m "not slow" tests/unit tests/train
