# Two commands on a fresh machine with Python >= 3.10 and make:
#   make run   set up .venv and plan the built-in default
#   make test  set up .venv with the test extras; lint, type-check and run the whole suite
#   make lint  ruff and mypy only
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: run test lint install install-test bytecode clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The stamp files make both targets idempotent: pip runs again only when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed

# The editable install's own modules get their bytecode written here, on every install (compileall skips what
# is up to date): with PYTHONDONTWRITEBYTECODE set, as on the project's machines, Python never writes it, so
# each run compiled about 100 modules from source, 0.5 s of the 2 s `solve --serving auto` (issue 15). A file
# edited after the install is compiled in memory, as before, until the next `make install`.
install: $(VENV)/.installed bytecode
install-test: $(VENV)/.installed-test bytecode

bytecode: | $(BIN)/python
	$(BIN)/python -m compileall -q models hardware rules solver benchmarks

# mypy cannot follow setuptools' editable finder, so the four code folders are linked under the one
# namespace they install as (build/typecheck/shardplan/...) and checked there (pyproject.toml [tool.mypy]).
TYPECHECK := build/typecheck/shardplan

lint: install-test
	$(BIN)/ruff check .
	mkdir -p $(TYPECHECK)
	for d in models hardware rules solver; do ln -sfn ../../../$$d $(TYPECHECK)/$$d; done
	$(BIN)/mypy

run: install
	$(BIN)/shardplan solve

# lint first, so a finding stops the run before the suite (README, "Tests and CI": its wall time in one
# process and on two cores). The suite includes the docstring examples (tests/unit/test_doctests.py runs them
# under their installed shardplan.* names). pytest-xdist runs it with one worker per core (TEST_WORKERS=0:
# in this process, no workers); --dist loadfile keeps each file's tests in one worker, in file order, as a
# plain run has them, so module-scoped fixtures and cached builds are shared within a file as before.
TEST_WORKERS ?= auto
test: install-test lint
	bash .ci/ensure-chromium  # headless Chromium for the HTML report's browser test
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

clean:
	rm -rf $(VENV) build *.egg-info
