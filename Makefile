# The two entry points a fresh machine needs: `make demo` and `make test` (`make lint` before a commit).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench screenshots clean

# pip's and the build backend's chatter goes to a log, shown only if the install fails.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip > $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	$(BIN)/pip install --quiet -e '.[dev]' >> $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m taskherd.demo
	$(BIN)/python -m taskherd.demo.workflow

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 tests

# ruff and mypy read their settings from pyproject.toml; a finding fails the target.
lint: $(STAMP)
	$(BIN)/ruff check taskherd tests bench
	$(BIN)/mypy

# The dashboard's pictures in docs/screenshots/, made by its browser test from the pages as
# they are now.
screenshots: $(STAMP)
	TASKHERD_SCREENSHOTS=docs $(BIN)/python -m pytest -q tests/api/test_dashboard_a11y_browser.py -k screenshots

bench: $(STAMP)
	status=0; for script in bench/*.py; do echo "== $$script"; $(BIN)/python $$script || status=1; done; exit $$status

clean:
	rm -rf $(VENV) build *.egg-info
