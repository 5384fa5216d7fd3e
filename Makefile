# Two commands from a fresh clone: `make run` and `make test`. Java 17+ is the one system need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test fuzz lint install check-java clean

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

# Four pytest-xdist workers on CI's two cores: the Spark tests mostly wait (micro-batch
# triggers, Python worker starts, checkpoint files), and a serial run kept one core about half
# busy (docs/testing.md, "How long CI takes").
TEST_WORKERS ?= 4
test: $(STAMP) check-java lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal

# The fuzzer (docs/testing.md): fresh random cases against the oracle for FUZZ_MINUTES;
# SEED replays a run, BACKEND=gpu drives the GPU backend, SPECIAL=off leaves out NaN/inf/-0.0
# and integer extremes. No Java needed.
FUZZ_MINUTES ?= 10
SEED ?=
BACKEND ?= cpu
SPECIAL ?=
fuzz: $(STAMP)
	$(PY) -m pytest -q tests/test_fuzz.py::test_random_cases_match_the_oracle --fuzz \
		--fuzz-minutes=$(FUZZ_MINUTES) --backend=$(BACKEND) $(if $(SEED),--fuzz-seed=$(SEED)) \
		$(if $(SPECIAL),--fuzz-special=$(SPECIAL))

lint: $(STAMP)
	$(PY) -m ruff check mangonel tests benchmarks examples
	$(PY) -m ruff format --check mangonel tests benchmarks examples

clean:
	rm -rf $(VENV) build *.egg-info
