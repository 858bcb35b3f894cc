# joulebound — set-up and common tasks. Every target builds .venv itself on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is an optional extra; override e.g. TORCH_SPEC="torch==2.13.0+cu128" on a GPU machine.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: venv demo test browser bench lint wheel clean attack

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e ".[torch,dev]"
	@# compile the numba loops (characterize's table, the switch-aware DP) into their on-disk
	@# cache once, so later processes load them (~1 s) instead of each compiling them (~10 s)
	$(BIN)/python -c "from joulebound.workload.analytic import build_trace; \
	from joulebound.gpumodel import characterize; from joulebound.planning.solve import plan_switch_aware; \
	plan_switch_aware(characterize(build_trace('gpt2-small'), 'rtx3080ti'), slowdown=0.01, switch_latency_s=6e-3)"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/joulebound demo

# the suite on both cores of the CI machine (pytest-xdist; every test is independent: own tmp
# dirs, torchrun --standalone on free ports, one GPU-lock dir per test); `pytest -q` alone works too.
# loadfile --no-loadscope-reorder: whole modules, in collection order (the long ones first,
# tests/conftest.py), each worker taking the next when it runs out: module fixtures are built
# once and no core idles at the end. PYTHONDONTWRITEBYTECODE is cleared for the run: with it set
# (as on some CI images) every CLI / torchrun child recompiled the package and both workers
# re-rewrote every test module; the caches land in the ignored __pycache__ folders
test: $(STAMP) browser
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

# headless Chromium for the HTML report checks (Debian's package; installed when run as root)
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (apt-get) for the HTML report browser checks"; \
	    { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || \
	      echo "note: chromium could not be installed: the browser checks will be skipped"; \
	  else echo "note: no chromium and not root: the browser checks of the HTML reports will be skipped"; fi; }

bench: $(STAMP)
	$(BIN)/pip install --quiet -e ".[bench]"
	$(BIN)/python -m benchmarks.run_all

# the clock-control attacks of issue 30 (lock hijack, stop signals, helper restarts, flooding
# clients, crashing training processes), repeated ATTACK_ROUNDS times (default 20): the races
# they probe show up over many rounds, not in one (`make test` runs each once)
attack: $(STAMP)
	@for i in $$(seq 1 $${ATTACK_ROUNDS:-20}); do echo "attack round $$i"; \
	  $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_runtime_helper_robust.py \
	    tests/test_runtime_clock_trust.py tests/test_runtime_guardian.py || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check joulebound research tests benchmarks

# a wheel in dist/ (what `pip install .` installs), checked to carry the package data
wheel: $(STAMP)
	rm -rf dist
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir dist .
	$(BIN)/python -c "import glob, zipfile; w = glob.glob('dist/joulebound-*.whl'); \
	names = zipfile.ZipFile(w[0]).namelist(); \
	assert 'joulebound/hw/data/rtx3080ti.toml' in names, 'catalog TOMLs missing'; \
	assert 'joulebound/core/data/manifest.csv' in names, 'data manifest missing'; \
	assert not any(n.startswith('research/') for n in names), 'research/ is not for the wheel'; \
	print(w[0], len(names), 'files')"

clean:
	rm -rf $(VENV) joulebound-report .pytest_cache dist build
