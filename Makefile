# Each target creates the venv it needs if it is missing; nothing needs to be installed beforehand but python3.
PYTHON ?= python3
VENV ?= .venv
# The latest Airflow 3 release: .venv (demo, bench, lint, typecheck, the suite with coverage, the UI test).
AIRFLOW_VERSION ?= 3.3.2
BIN := $(VENV)/bin
# The lowest Airflow release we declare (pyproject: apache-airflow>=3.0.2): the suite runs there too, in
# its own venv. Airflow's constraints files are not reachable from CI, so its dependencies are resolved as
# of that release's upload (AIRFLOW_MIN_DATE: what its constraints held), except the packages whose floor
# in pyproject.toml is newer (MIN_NEWER). The FAB provider gives Airflow < 3.2 its connection-form widgets.
AIRFLOW_MIN_VERSION ?= 3.0.2
AIRFLOW_MIN_DATE ?= 2025-06-11T00:00:00Z
MIN_NEWER ?= apache-airflow-providers-common-compat urllib3 anyio
# ... on the lowest Python we declare (pyproject: requires-python >=3.10): pyenv's 3.10 where the machine has
# one (it has no python3.10 on the PATH), else python3.10 on the PATH, else $(PYTHON), which test-min names.
PYENV_ROOT ?= $(HOME)/.pyenv
MIN_PYTHON ?= $(firstword $(wildcard $(PYENV_ROOT)/versions/3.10.*/bin/python3.10) \
	$(shell command -v python3.10 >/dev/null 2>&1 && python3.10 -c 'import sys; print(sys.executable)' 2>/dev/null) $(PYTHON))
VENV_MIN ?= .venv-min
BIN_MIN := $(VENV_MIN)/bin
# The latest Airflow on the newest Python the machine has of those it supports (it declares up to 3.14):
# pyenv's 3.14 or 3.13, else python3.14 or python3.13 on the PATH; none: test-newest says so and skips.
NEW_PYTHON ?= $(firstword $(wildcard $(PYENV_ROOT)/versions/3.14.*/bin/python3.14 $(PYENV_ROOT)/versions/3.13.*/bin/python3.13) \
	$(shell for p in python3.14 python3.13; do command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; print(sys.executable)' && break; done 2>/dev/null))
VENV_NEW ?= .venv-newest
BIN_NEW := $(VENV_NEW)/bin
# The UI test drives Debian's chromium through Playwright (no browser download).
CHROMIUM ?= /usr/bin/chromium
STAMP := $(VENV)/.installed-$(AIRFLOW_VERSION)
STAMP_MIN := $(VENV_MIN)/.installed-$(AIRFLOW_MIN_VERSION)
STAMP_NEW := $(VENV_NEW)/.installed-$(AIRFLOW_VERSION)
# Extra pytest arguments for the three runs of the suite, e.g. PYTEST_ARGS="-x tests/unit".
PYTEST_ARGS ?=
# Extra pytest arguments for the deployment suite, e.g. DEPLOYMENT_ARGS="-k crash".
DEPLOYMENT_ARGS ?=

.PHONY: install install-min install-newest test test-latest test-ui test-deployment test-min test-newest bench-smoke lint typecheck docs docs-check browser demo bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[test,bench,docs]" "apache-airflow==$(AIRFLOW_VERSION)"
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

# `make demo` needs only the provider, its sandbox and Airflow; `make test` adds the rest to the same venv
# (its install removes this stamp, and the demo then runs on the full one).
STAMP_DEMO := $(VENV)/.installed-demo-$(AIRFLOW_VERSION)
$(STAMP_DEMO): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[sandbox]" "apache-airflow==$(AIRFLOW_VERSION)"
	touch $@

# Made afresh each time (no package left from another resolution); uv from .venv: one download cache.
$(STAMP_MIN): $(STAMP) pyproject.toml Makefile
	rm -rf $(VENV_MIN)
	$(MIN_PYTHON) -m venv --without-pip $(VENV_MIN)
	$(BIN)/uv pip install --quiet --python $(BIN_MIN)/python --exclude-newer $(AIRFLOW_MIN_DATE) \
		$(foreach package,$(MIN_NEWER),--exclude-newer-package $(package)=false) \
		-e ".[test,bench]" "apache-airflow[fab]==$(AIRFLOW_MIN_VERSION)"
	rm -f $(VENV_MIN)/.installed-*
	touch $@

install-min: $(STAMP_MIN)

# Made afresh each time, like .venv-min; the same Airflow as .venv.
$(STAMP_NEW): $(STAMP) pyproject.toml Makefile
	rm -rf $(VENV_NEW)
	$(NEW_PYTHON) -m venv --without-pip $(VENV_NEW)
	$(BIN)/uv pip install --quiet --python $(BIN_NEW)/python -e ".[test]" "apache-airflow==$(AIRFLOW_VERSION)"
	rm -f $(VENV_NEW)/.installed-*
	touch $@

install-newest: $(STAMP_NEW)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# A file target, not a command run each time: where chromium is there, it takes no job of `make -j`.
browser: $(CHROMIUM)
$(CHROMIUM):
	export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq chromium

typecheck: $(STAMP)
	$(BIN)/mypy

# The manual, built into site/ (open site/index.html).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# What CI checks of the manual: it builds with no warning (broken link or anchor, page missing from the nav).
docs-check: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $$(mktemp -d)

# lint, mypy, the manual and the installs first, one at a time. Then the three runs of the suite and the
# benchmarks' smoke run, SUITE_JOBS at a time, the longest first: a run of the suite waits on one Airflow
# subprocess at a time, so it leaves the other cores free for the next. They share no port (each asks the
# OS for one), no pytest temp dir (a numbered, locked basetemp per session) and no Airflow metadata
# database (each session migrates its own); --output-sync prints each run's output whole. The deployment
# suite last and alone: its scenarios wait on a whole distributed Airflow on the same cores.
SUITE_JOBS ?= 2
test: lint typecheck docs-check install install-min $(if $(strip $(NEW_PYTHON)),install-newest) browser
	$(MAKE) --no-print-directory -j$(SUITE_JOBS) --output-sync=target test-latest test-min test-ui test-newest bench-smoke
	$(MAKE) --no-print-directory test-deployment

# tests/deployment and tests/bench run once, in their own targets (test-deployment, bench-smoke): the three
# runs of the suite leave them out.
NOT_IN_SUITE := --ignore=tests/deployment --ignore=tests/bench

# Branch coverage of the package, measured in process; settings and fail_under (90 %) in pyproject.toml.
# `coverage run`, not pytest-cov: the provider's own pytest plugin (entry point pytest11) imports the
# package before pytest-cov would start, so its import-time lines would count as missed.
test-latest: $(STAMP)
	$(BIN)/python -m coverage run -m pytest --ignore=tests/ui $(NOT_IN_SUITE) $(PYTEST_ARGS)
	$(BIN)/python -m coverage report

# tests/ui (the React UI in chromium, against real API servers in subprocesses: nothing to add to the
# coverage), latest Airflow only, in a run of its own so that the pool of runs above stays balanced.
test-ui: $(STAMP) $(CHROMIUM)
	$(BIN)/python -m pytest -p no:cacheprovider tests/ui $(PYTEST_ARGS)

# A distributed Airflow on 127.0.0.1 (PostgreSQL, Redis, CeleryExecutor with two workers, the triggerer),
# latest Airflow only: installs Debian's postgresql and redis-server with apt when missing (as root), and
# fails, never skips, when it cannot. Its Airflow runs in subprocesses, so it adds nothing to coverage.
# See docs/running-in-production.md.
test-deployment: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider tests/deployment $(DEPLOYMENT_ARGS)

# tests/ui drives the React UI of the latest Airflow only (see README, "Development"); tests/deployment
# runs on the latest Airflow only (test-deployment).
test-min: $(STAMP_MIN)
	@$(BIN_MIN)/python -c 'import sys, airflow; print(f"lowest: Airflow {airflow.__version__} on Python {sys.version.split()[0]}")'
	$(BIN_MIN)/python -m pytest -p no:cacheprovider --ignore=tests/ui $(NOT_IN_SUITE) $(PYTEST_ARGS)

# The suite on NEW_PYTHON, less what the Python version does not change: the UI and the deployment, and
# the tests marked dags (real DAG runs in `airflow dags test` subprocesses: Airflow 3.3.2's own run loop,
# as in test-latest). Our code runs on NEW_PYTHON in the unit, integration (real sockets, asyncio, TLS)
# and reliability tests, all kept; the dags tests run on 3.3.2 and 3.0.2.
ifneq ($(strip $(NEW_PYTHON)),)
test-newest: $(STAMP_NEW)
	@$(BIN_NEW)/python -c 'import sys, airflow; print(f"newest: Airflow {airflow.__version__} on Python {sys.version.split()[0]}")'
	$(BIN_NEW)/python -m pytest -p no:cacheprovider --ignore=tests/ui $(NOT_IN_SUITE) -m "not dags" $(PYTEST_ARGS)
else
test-newest:
	@echo "test-newest: no Python 3.13 or 3.14 on this machine (pyenv's or on the PATH): skipped"
endif

demo: $(if $(wildcard $(STAMP)),$(STAMP),$(STAMP_DEMO))
	$(BIN)/python -m dags_examples.demo

bench: $(STAMP)
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

# The benchmarks' quick mode runs and writes well-formed records (tests/bench; no time is judged): once, on
# the latest Airflow. It runs the benchmarks in subprocesses, so it adds nothing to coverage.
bench-smoke: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider tests/bench

clean:
	rm -rf $(VENV) $(VENV_MIN) $(VENV_NEW) .pytest_cache .ruff_cache .mypy_cache .coverage site
