# joulebound — set-up and common tasks. Every target builds .venv itself on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is an optional extra; override e.g. TORCH_SPEC="torch==2.13.0+cu128" on a GPU machine.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: venv demo test bench lint clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e ".[torch,dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/joulebound demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run_all

lint: $(STAMP)
	$(BIN)/ruff check joulebound tests benchmarks

clean:
	rm -rf $(VENV) joulebound-report .pytest_cache
