# The two entry points a fresh machine needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m taskherd.demo

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 tests

bench: $(STAMP)
	$(BIN)/python bench/queue.py

clean:
	rm -rf $(VENV) build *.egg-info
