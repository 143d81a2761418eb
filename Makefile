# Each target creates .venv if it is missing; nothing needs to be installed beforehand but python3.
PYTHON ?= python3
VENV ?= .venv
AIRFLOW_VERSION ?= 3.3.2
BIN := $(VENV)/bin
# The UI test drives Debian's chromium through Playwright (no browser download).
CHROMIUM ?= /usr/bin/chromium
STAMP := $(VENV)/.installed-$(AIRFLOW_VERSION)

.PHONY: install test lint browser demo bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[test,bench]" "apache-airflow==$(AIRFLOW_VERSION)"
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

browser:
	test -x $(CHROMIUM) || (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq chromium)

test: lint browser
	$(BIN)/python -m pytest

demo: $(STAMP)
	$(BIN)/python -m dags_examples.demo

bench: $(STAMP)
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
