# Two commands on a fresh clone:
#   make run    set up .venv and start the guided assistant (TUI) on the demo data and the recommended model
#   make test   set up .venv with the dev extras and run the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: run test test-quick test-all setup setup-dev demo clean browser-deps

$(BIN)/python:
	@echo "==> Creating $(VENV) (first run only; the whole set-up takes a few minutes)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch is pinned (torch==2.13.0, a CPU build); it is installed first so no CUDA build is pulled in.
# pip prints each package it fetches, so the set-up is never silent; --progress-bar shows the large downloads.
PIP_INSTALL := $(BIN)/pip install --progress-bar on --disable-pip-version-check
QUIET_SATISFIED := { grep -v "^Requirement already satisfied" || true; }
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	@echo "==> [1/2] torch 2.13.0, CPU build (about 200 MB)"
	$(PIP_INSTALL) "torch==2.13.0" 2>&1 | $(QUIET_SATISFIED)
	@echo "==> [2/2] lf-assistant and its dependencies"
	$(PIP_INSTALL) -e . 2>&1 | $(QUIET_SATISFIED)
	@touch $@
	@echo "==> Set up: $(BIN)/lf-assistant"

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	@echo "==> Test dependencies (pytest, snapshot, browser and lint tools)"
	$(PIP_INSTALL) -e ".[dev]" 2>&1 | $(QUIET_SATISFIED)
	@touch $@

setup: $(VENV)/.installed
setup-dev: $(VENV)/.installed-dev

run: setup
	$(BIN)/lf-assistant

demo: setup
	$(BIN)/lf-assistant train examples/demo/tiny_lora_sft.yaml

# Everything, the tests marked slow included (about 3 minutes more on 2 CPU cores): what CI runs.
test: setup-dev
	$(BIN)/python -m pytest -q

# Without the tests marked slow, while working.
test-quick: setup-dev
	$(BIN)/python -m pytest -q -m "not slow"

test-all: test

# Debian's Chromium for the browser test (tests/web/test_browser.py drives it through Playwright; nothing is
# downloaded by Playwright itself). Without it that test is skipped.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
browser-deps:
	$(SUDO) apt-get install -y chromium || { $(SUDO) apt-get update && $(SUDO) apt-get install -y chromium; }

clean:
	rm -rf $(VENV) lf_runs saves models/lf-tiny-qwen3 models/lf-tiny-llama
