# Two commands on a fresh clone:
#   make run    set up .venv and start the guided assistant (TUI) on the built-in tiny model and demo data
#   make test   set up .venv with the dev extras and run the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: run test test-all setup setup-dev demo clean browser-deps

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch is pinned (torch==2.13.0, a CPU build); it is installed first so no CUDA build is pulled in.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

setup: $(VENV)/.installed
setup-dev: $(VENV)/.installed-dev

run: setup
	$(BIN)/lf-assistant

demo: setup
	$(BIN)/lf-assistant train examples/demo/tiny_lora_sft.yaml

test: setup-dev
	$(BIN)/python -m pytest -q -m "not slow"

# Everything, including tests marked slow (minutes on 2 CPU cores).
test-all: setup-dev
	$(BIN)/python -m pytest -q

# Debian's Chromium for the browser test (tests/web/test_browser.py drives it through Playwright; nothing is
# downloaded by Playwright itself). Without it that test is skipped.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
browser-deps:
	$(SUDO) apt-get install -y chromium || { $(SUDO) apt-get update && $(SUDO) apt-get install -y chromium; }

clean:
	rm -rf $(VENV) lf_runs saves models/lf-tiny-qwen3 models/lf-tiny-llama
