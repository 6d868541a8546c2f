# make book   - create .venv, install requirements.txt, build the HTML book into _build/html
# make test   - create .venv, install requirements.txt, run the whole test suite (pytest)
# make test-quick - the edit loop's subset (about 3 minutes here once the compile cache is warm):
#   no notebook through nbval, no slow test, no compile of every kernel for every target
# make test-seeds [SEEDS="1 2 3"] - the randomised tests again, on other seeds
# make test-suspects [SEEDS="1 2 3"] - the mutant tests (a wrong answer must fail on every seed) on
#   each seed, then once serially: the same outcomes with -n 2 and -n 0 (a few minutes)
# make labs   - regenerate labs/ from solutions/ (labs are solutions with exercises cut out)
# make grade LAB=labs/NN_name.ipynb - grade a lab: one line per exercise (MODE=cpu|gpu to force,
#   EX=N for exercise N only, V=1 for every reason in full). When an exercise fails, the recipe
#   ends make itself with SIGPIPE, which make dies of silently: the status is non-zero (141)
#   without make's "make: *** [Makefile:NN: grade] Error 1", which reads like a crash.
# make jupyter [LAB=labs/NN_name.ipynb] - install JupyterLab into .venv (the first time) and open it
#   (JUPYTER_ARGS are passed on, e.g. JUPYTER_ARGS='--no-browser --allow-root' in a container)
# make clean  - remove the built book, pytest's cache and the compile cache
#
# On a machine with no package index (the course's GPU machine), run in the environment that is
# already there instead of a venv:   make test USE_SYSTEM=1
SHELL := /bin/bash
comma := ,
PYTHON ?= python3
VENV ?= .venv
ifeq ($(USE_SYSTEM),1)
PY := $(PYTHON)
JB := jupyter-book
STAMP :=
else
PY := $(VENV)/bin/python
JB := $(VENV)/bin/jupyter-book
STAMP := $(VENV)/.installed
endif
PYTEST_ARGS ?= -n 2 --dist loadgroup --no-loadscope-reorder

.PHONY: book test test-quick test-seeds test-suspects labs setup clean grade jupyter python-version

# The oldest Python the course runs on: pyproject.toml's requires-python (its one home). Checked
# first, in one line (an older Python otherwise meets pip's "no matching distribution for cupy").
MIN_PYTHON := $(shell sed -n 's/^requires-python *= *">=\([0-9.]*\)".*/\1/p' pyproject.toml)
python-version:
	@v=$$($(PYTHON) -c 'import platform; print(platform.python_version())' 2>/dev/null) || v="not found"; \
	$(PYTHON) -c "import sys; sys.exit(sys.version_info < ($(subst .,$(comma),$(MIN_PYTHON)),))" 2>/dev/null || \
	{ echo "The course needs Python $(MIN_PYTHON) or newer; $(PYTHON) is $$v (run make PYTHON=python3.X with X >= $(word 2,$(subst ., ,$(MIN_PYTHON))))."; exit 2; }
book test test-quick test-seeds test-suspects labs setup grade jupyter: python-version

$(VENV)/.installed: requirements.txt pyproject.toml | python-version
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -r requirements.txt
	@# setuptools' build backend reports every editable install with an "Editable installation."
	@# warning (information only) that pip -q still prints: silenced by its message alone
	PYTHONWARNINGS='ignore:Editable installation:UserWarning' $(VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

setup: $(STAMP)

# Two pytest-xdist workers, each test file one unit of work except the few tests/conftest.py
# splits (a lab's grading, a target's compiles), the longest units first; a fixed hash seed so
# that both workers collect the same tests. Serially: make test PYTEST_ARGS=
test: $(STAMP)
	PYTHONHASHSEED=0 $(PY) -m pytest $(PYTEST_ARGS)

# What the edit loop leaves to `make test` (run it before a commit): the labs and the chapters
# through nbval (tests marked nbval: solutions, graded fixtures, cheats), the tests marked slow,
# tests/test_toolchain.py (every kernel file for every target; a chapter's own tests still
# compile what they use) and tests/test_interpreter.py (every topic's Problems sampled on the
# interpreter; a chapter's own tests run its cases). Measured here with a cold compile cache and
# test_interpreter.py still in: 740 CPU-s, 320 of them compiling, 140 test_interpreter.py; so
# about 280 CPU-s once the cache is warm: under 3 minutes on 2 cores.
QUICK_ARGS ?= -m "not nbval and not slow" --ignore=tests/test_toolchain.py \
	--ignore=tests/test_interpreter.py
test-quick: $(STAMP)
	PYTHONHASHSEED=0 $(PY) -m pytest $(PYTEST_ARGS) $(QUICK_ARGS)

# The randomised tests (those drawing from the rng fixture, seeded by their test id) again on
# other seeds: each must pass on every seed it can draw. SEEDS="1 2 3" by default; not in CI.
SEEDS ?= 1 2 3
test-seeds: $(STAMP)
	@for s in $(SEEDS); do echo "FRAGLAB_TEST_SEED=$$s"; \
	  FRAGLAB_TEST_SEED=$$s PYTHONHASHSEED=0 $(PY) -m pytest $(PYTEST_ARGS) -q -m randomised || exit 1; done

# The known suspects: tests marked mutant (randomised tests that prove a wrong answer, kernel or
# weakened check fails; tests/conftest.py marks them), the grading fixtures' nbval left to
# test-seeds. On each seed of SEEDS with the workers of PYTEST_ARGS, then on the last seed serially
# (-n 0): tests/outcomes.py compares the two runs' outcomes test by test.
SUSPECTS := -m "mutant and not nbval" -p no:cacheprovider -q
test-suspects: $(STAMP)
	@set -e; d=$$(mktemp -d); for s in $(SEEDS); do echo "FRAGLAB_TEST_SEED=$$s"; \
	  FRAGLAB_TEST_SEED=$$s PYTHONHASHSEED=0 $(PY) -m pytest $(PYTEST_ARGS) $(SUSPECTS) --junitxml=$$d/n.xml; done; \
	echo "FRAGLAB_TEST_SEED=$$s -n 0"; \
	FRAGLAB_TEST_SEED=$$s PYTHONHASHSEED=0 $(PY) -m pytest -n 0 $(SUSPECTS) --junitxml=$$d/0.xml; \
	$(PY) tests/outcomes.py $$d/n.xml $$d/0.xml; rm -rf $$d

book: $(STAMP)
	$(JB) build . --warningiserror --keep-going
	@echo "book: open _build/html/index.html"

labs: $(STAMP)
	$(PY) -m fraglab.labs build

grade: $(STAMP)
	@test -n "$(LAB)" || { echo 'usage: make grade LAB=labs/NN_name.ipynb [MODE=cpu|gpu] [EX=N] [V=1]'; exit 2; }
	@$(PY) -m fraglab.grading $(LAB) $(if $(MODE),--mode $(MODE)) $(if $(EX),--exercise $(EX)) $(if $(V),-v) \
	  || { s=$$?; kill -PIPE $$PPID 2>/dev/null; exit $$s; }

# JupyterLab is not in requirements.txt: the tests and the book never start it, and its server
# packages pull in a JSON-schema format checker that costs every pytest process a second.
JUPYTERLAB := jupyterlab>=4,<5
jupyter: $(STAMP)
	@$(PY) -c "import jupyterlab" 2>/dev/null || $(PY) -m pip install -q "$(JUPYTERLAB)"
	$(PY) -m jupyterlab $(JUPYTER_ARGS) $(LAB)

clean:
	rm -rf _build .pytest_cache
	rm -rf "$${FRAGLAB_CACHE:-$$HOME/.cache/fraglab}"   # the compile cache (fraglab.tools.cache_dir)
