# One-command set-up: every target that runs code first makes sure .venv is there and current.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.realm-tta-installed
PYTEST_ARGS ?=

.PHONY: venv demo test test-all parity lint format clean

venv: $(STAMP)

# Re-installs when pyproject.toml changes; reuses the venv otherwise.
$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: onnxruntime-training 1.19.2 needs Python 3.11 (set PYTHON=...)"; exit 1; }
	@test -x $(BIN)/python || { echo "creating $(VENV) with $$($(PYTHON) --version)"; $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/realm demo

test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Both parity tiers, tables written to docs/ (the slow tier takes a few minutes on 2 cores).
parity: $(STAMP)
	$(BIN)/realm parity --out docs/parity-fast
	$(BIN)/realm parity --slow --out docs/parity-slow

lint: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .

format: $(STAMP)
	$(BIN)/python -m ruff format .
	$(BIN)/python -m ruff check --fix .

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
