# The two entry points a fresh machine needs: `make demo` and `make test` (`make lint` before a commit).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench screenshots uplot clean

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
	TASKHERD_SCREENSHOTS=docs $(BIN)/python -m pytest -q tests/api/test_dashboard_a11y_browser.py tests/api/test_dashboard_charts_browser.py -k screenshots

# The charting library the dashboard's /charts page draws with, vendored (no CDN): uPlot from
# npm at UPLOT_VERSION, its licence and its registry record (version, licence, integrity)
# beside it. `make uplot UPLOT_VERSION=x.y.z` refreshes it; commit what changed.
UPLOT_VERSION ?= 1.6.32
STATIC = taskherd/api/static
uplot:
	rm -rf .uplot && mkdir .uplot
	cd .uplot && npm pack --silent uplot@$(UPLOT_VERSION) > /dev/null && tar xzf uplot-$(UPLOT_VERSION).tgz
	cp .uplot/package/dist/uPlot.iife.min.js .uplot/package/dist/uPlot.min.css $(STATIC)/
	cp .uplot/package/LICENSE $(STATIC)/uPlot.LICENSE
	npm view --json uplot@$(UPLOT_VERSION) name version license homepage dist.tarball dist.integrity > $(STATIC)/uPlot.json
	rm -rf .uplot

bench: $(STAMP)
	status=0; for script in bench/*.py; do echo "== $$script"; $(BIN)/python $$script || status=1; done; exit $$status

clean:
	rm -rf $(VENV) build *.egg-info
