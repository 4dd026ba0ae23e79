# Every target sets itself up from nothing: a local virtualenv (.venv) with the project
# installed in editable mode from setup.cfg.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
BENCH_STAMP := $(VENV)/.installed-bench
PYTEST_ARGS ?=
# make test's pytest-xdist workers: each has its own embedded broker and SparkSession; a free
# worker takes the next test (--maxschedchunk 1: no batches handed out ahead, so one worker
# does not get all the long tests), and tests/harness/long_first.py puts the long files first.
# TEST_WORKERS=0 runs the suite in this one process.
TEST_WORKERS ?= 2

.PHONY: all venv run test test-fast test-slow lint typecheck docs bench bench-quick soak clean

all: test

$(STAMP): setup.cfg pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	@touch $(BENCH_STAMP)

venv: $(STAMP)

## run: the main job - seed 000's sales aggregation on the embedded broker and local Spark
run: $(STAMP)
	$(BIN)/python -m topologies.sales_demo

## test: the whole suite (unit, driver, integration with a real broker and local Spark)
test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -n $(TEST_WORKERS) --dist load --maxschedchunk 1 $(PYTEST_ARGS)

## test-slow: the long fault scenarios only (marked slow)
test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

## test-fast: everything that needs neither the broker nor Spark
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not integration" $(PYTEST_ARGS)

## lint: what CI checks before the tests (ruff lint rules and formatting, and the import
## contract of pyproject.toml: packages import downwards only)
LINT_PATHS := processor_api topologies tests bench
lint: $(STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/lint-imports --no-cache

## typecheck: mypy over processor_api (settings in pyproject.toml; CI runs it after lint)
typecheck: $(STAMP)
	$(BIN)/mypy

## docs: the manual in docs/ as a site under site/ (MkDocs; a warning fails the build, as in CI)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench.run --full

bench-quick: $(BENCH_STAMP)
	$(BIN)/python -m bench.run --quick

## soak: kill -9 run-topology repeatedly (seed 000, both guarantees) and compare with a reference fold
SOAK_EVENTS ?= 30000
SOAK_KILLS ?= 8
SOAK_REPEAT ?= 1
soak: $(STAMP)
	$(BIN)/python -m tests.reliability.soak --events $(SOAK_EVENTS) --kills $(SOAK_KILLS) \
		--repeat $(SOAK_REPEAT) --guarantee both --out bench/results/soak-$$(date +%F).json

clean:
	rm -rf $(VENV) build dist site *.egg-info .pytest_cache .ruff_cache
