# Two commands on a fresh machine: `make run` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

.PHONY: setup run test lint
setup: $(VENV)/.installed

run: setup
	$(PY) -m agentic_rl.main --config=configs/sokoban.py:gigpo,quick --workdir=runs/quickstart

test: setup
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=15
	$(VENV)/bin/ruff check .

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
