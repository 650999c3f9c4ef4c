# The commands README names. `make test` and `make demo` each build the virtualenv and install everything.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: install demo test lint bench
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/install-system-deps.sh
	bash scripts/install-system-deps.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

demo: install
	$(VENV)/bin/hotboard demo

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: lint
	$(VENV)/bin/pytest

bench: install
	$(PY) -m bench.worker
