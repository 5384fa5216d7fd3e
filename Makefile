# Two commands from a fresh clone: `make run` and `make test`. Java 17+ is the one system need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint install check-java clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

check-java:
	@$(PY) -m mangonel.runtime.spark.java

run: $(STAMP) check-java
	$(PY) examples/spark_generator.py

test: $(STAMP) check-java lint
	$(PY) -m pytest -q

lint: $(STAMP)
	$(PY) -m ruff check mangonel tests benchmarks examples
	$(PY) -m ruff format --check mangonel tests benchmarks examples

clean:
	rm -rf $(VENV) build *.egg-info
