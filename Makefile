# Bootstrap a .venv with Python >= 3.12 and run the two jobs of the project.
#   make demo    the main job: every library model with every applicable engine
#   make test    the test suite CI runs (long statistical checks marked `slow` excluded;
#                each has a faster version of the same check in this run)
#   make test-all  everything, the `slow` checks included
# PYTHON=/path/to/python3.12 overrides the interpreter search.

VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# Thread limits for fair, reproducible CPU runs on small machines.
export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1
export OPENBLAS_NUM_THREADS ?= 1

# First interpreter >= 3.12 that actually runs: PYTHON=, then python3.12/python3.13 on PATH
# (3.12 first: pystan, a benchmark extra, has no 3.13 build yet),
# then pyenv-installed versions (3.12 first, then the newest).
FIND_PYTHON = \
  ok() { "$$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; }; \
  if [ -n "$(PYTHON)" ]; then \
    if ok "$(PYTHON)"; then echo "$(PYTHON)"; exit 0; fi; \
    echo "PYTHON=$(PYTHON) does not run or is older than 3.12" >&2; exit 1; fi; \
  for p in python3.12 python3.13 python3; do if ok $$p; then command -v $$p; exit 0; fi; done; \
  root=$${PYENV_ROOT:-$$HOME/.pyenv}; \
  for d in $$(ls -d $$root/versions/3.12* 2>/dev/null | sort -rV) $$(ls -d $$root/versions/3.* 2>/dev/null | sort -rV); do \
    if ok $$d/bin/python3; then echo $$d/bin/python3; exit 0; fi; done; \
  echo "No Python >= 3.12 found: install one (e.g. pyenv install 3.12) or pass PYTHON=/path/to/python3.12" >&2; \
  exit 1

.PHONY: demo test test-all install clean bench

$(STAMP): pyproject.toml
	@py=$$($(FIND_PYTHON)) || exit 1; \
	if [ ! -x $(VPY) ]; then echo "Creating $(VENV) with $$py"; "$$py" -m venv $(VENV) || exit 1; fi
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/probmodels demo --out demo-output

test: $(STAMP)
	$(VPY) -m pytest -n 2 --dist worksteal -q -m "not slow"

test-all: $(STAMP)
	$(VPY) -m pytest -n 2 --dist worksteal -q

bench: $(STAMP)
	$(VPY) -m pip install -q -e '.[bench]'
	@echo "Run one script at a time, e.g. $(VPY) benchmarks/mcmc_overhead.py"

clean:
	rm -rf $(VENV) demo-output .pytest_cache
