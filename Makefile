# One-command set-up: every target that runs code first makes sure .venv is there and current.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.realm-tta-installed
PYTEST_ARGS ?=
# Tests pin torch to one thread (bit-for-bit reruns), so two processes use both cores of a
# small CI machine; a file stays in one process (its module-scoped fixtures are built once).
WORKERS ?= -n 2 --dist loadfile

CLIENT := clients/js
CLIENT_STAMP := $(CLIENT)/node_modules/.realm-tta-installed
WEB    := examples/web
WEB_STAMP := $(WEB)/node_modules/.realm-tta-installed
NODE_APP := examples/node
NODE_STAMP := $(NODE_APP)/node_modules/.realm-tta-installed

.PHONY: venv demo test test-all parity parity-current lint format clean web web-deps browser data

venv: $(STAMP)

# Re-installs when pyproject.toml changes; reuses the venv otherwise. uv (from PyPI) installs
# torch's wheels (gigabytes) several times faster than pip; pip does it where uv cannot.
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check
$(STAMP): pyproject.toml lab/pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: the dev environment needs Python 3.11 (onnxruntime-training 1.19.2 builds the training artifacts; set PYTHON=...)"; exit 1; }
	@test -x $(BIN)/python || { echo "creating $(VENV) with $$($(PYTHON) --version)"; $(PYTHON) -m venv $(VENV); }
	@echo "installing .[dev] and the lab (lab/) into $(VENV)"
	@{ $(PIP) 'uv>=0.5,<1' && $(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]' -e ./lab; } || \
		{ echo "uv could not install .[dev]: installing with pip"; $(PIP) -e '.[dev]' -e ./lab; }
	@touch $(STAMP)

demo: $(STAMP) data
	$(BIN)/realm demo

test: $(STAMP) web-deps browser data
	$(BIN)/python -m pytest -m "not slow" $(WORKERS) $(PYTEST_ARGS)

test-all: $(STAMP) web-deps browser data
	$(BIN)/python -m pytest $(WORKERS) $(PYTEST_ARGS)

# Both parity tiers, tables written to docs/ (the slow tier takes a few minutes on 2 cores).
parity: $(STAMP)
	$(BIN)/realm parity --out docs/parity-fast
	$(BIN)/realm parity --slow --out docs/parity-slow

# The fast tier on the portable graph under the newest plain onnxruntime from PyPI (a venv of
# its own: torch and onnxruntime cannot share one with the training build). Kernels change
# between ONNX Runtime versions; this is where that shows (docs/parity-current-ort.md).
VENV_CURRENT := .venv-current
parity-current:
	@test -x $(VENV_CURRENT)/bin/python || $(PYTHON) -m venv $(VENV_CURRENT)
	$(VENV_CURRENT)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[sdk,bench]' \
		onnx==1.17.0 onnxscript==0.7.2 onnx-ir==1.1.0 onnxruntime
	$(VENV_CURRENT)/bin/realm parity --backend onnx --out docs/parity-current-ort

lint: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .

format: $(STAMP)
	$(BIN)/python -m ruff format .
	$(BIN)/python -m ruff check --fix .

# The JavaScript client's and the examples' packages from the npm registry (the client's tests
# and type check: fast-check, typescript; the page's: onnxruntime-web, playwright-core). Without
# npm the JavaScript tests skip and say why; the rest of the suite still runs.
web-deps: $(CLIENT_STAMP) $(WEB_STAMP) $(NODE_STAMP)

$(CLIENT_STAMP): $(CLIENT)/package.json $(CLIENT)/package-lock.json
	@if command -v npm >/dev/null; then \
		{ npm ci --prefix $(CLIENT) --no-audit --no-fund --loglevel=error && touch $@; } || \
		echo "npm ci failed: the JavaScript client's tests will be skipped"; \
	else echo "npm not found: the JavaScript client's tests will be skipped"; fi

$(WEB_STAMP): $(WEB)/package.json $(WEB)/package-lock.json
	@if command -v npm >/dev/null; then \
		{ npm ci --prefix $(WEB) --no-audit --no-fund --loglevel=error && touch $@; } || \
		echo "npm ci failed: the browser client's tests will be skipped"; \
	else echo "npm not found: the browser client's tests will be skipped"; fi

# The Node.js edge app's onnxruntime-node (its .npmrc skips the CUDA download).
$(NODE_STAMP): $(NODE_APP)/package.json $(NODE_APP)/package-lock.json
	@if command -v npm >/dev/null; then \
		{ npm ci --prefix $(NODE_APP) --no-audit --no-fund --loglevel=error && touch $@; } || \
		echo "npm ci failed: the Node app's tests will be skipped"; \
	else echo "npm not found: the Node app's tests will be skipped"; fi

# Debian's Chromium for the headless browser tests, installed where missing and possible.
browser:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's chromium for the browser tests"; \
		( apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 || \
		  { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends chromium >/dev/null 2>&1; } ) || \
		echo "could not install chromium: the browser tests will be skipped"; \
	else echo "no /usr/bin/chromium and no root apt-get: the browser tests will be skipped"; fi

# Debian's Fashion-MNIST (the dataset's own IDX files) for the demo, the benchmarks and the
# tests, installed where missing and possible; $(REALM_DATA) may name a folder of the files.
FMNIST_DIR := /usr/share/datasets/fashion-mnist
data:
	@if [ -f $(FMNIST_DIR)/t10k-labels-idx1-ubyte.gz ] || [ -n "$$REALM_DATA" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's dataset-fashion-mnist (30 MB) for the demo, the web page and the tests"; \
		( apt-get install -y --no-install-recommends dataset-fashion-mnist >/dev/null 2>&1 || \
		  { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends dataset-fashion-mnist >/dev/null 2>&1; } ) || \
		echo "could not install dataset-fashion-mnist: the demo and the web page run the digits, and the Fashion-MNIST tests skip"; \
	else echo "no $(FMNIST_DIR) and no root apt-get: install dataset-fashion-mnist or set REALM_DATA to a folder of the four Fashion-MNIST files (the demo and the web page run the digits; the Fashion-MNIST tests skip)"; fi

# The web demo on http://127.0.0.1:8000/: realm demo's model exported for every method, its stream.
web: $(STAMP) web-deps data
	$(BIN)/python $(WEB)/build_site.py --out build/web --serve

clean:
	rm -rf $(VENV) .venv-runtime $(VENV_CURRENT) build dist *.egg-info .pytest_cache .ruff_cache $(CLIENT)/node_modules $(WEB)/node_modules $(NODE_APP)/node_modules

# The Fashion-MNIST-C tables of docs/fmnist.md, every one by this one command. Hours on two
# cores (docs/fmnist.md says how many); each run is kept as it finishes in runs.jsonl under
# lab/runs/ (the place of OUT under docs/), so the same command started again goes on where it stopped and redoes nothing.
FMNIST_MODELS ?= resnet26_gn mobilenetv3_bn vit_ln
FMNIST_SEEDS  ?= 0 1 2
FMNIST_BENCH   = $(BIN)/realm-lab bench quality --dataset fmnist-c --jobs 2
# Table 1's rows that export (the AugMix rows run apart): the 1,000-sample and full-length tables.
FMNIST_ROWS   ?= none tent eta eata sar deyo realm realm-guarded
FMNIST_LONG   := continual mixed gradual correlated long junk-noise junk-image junk-class junk-dark
.PHONY: fmnist-tables fmnist-val
fmnist-tables: $(STAMP) data
	@for m in $(FMNIST_MODELS); do \
		$(FMNIST_BENCH) --model $$m --settings episodic --seeds $(FMNIST_SEEDS) --limit 1000 \
			--methods $(FMNIST_ROWS) --out docs/fmnist/$$m || exit 1; \
	done
	$(FMNIST_BENCH) --settings episodic --seeds 0 --limit 1000 --methods eta sar realm \
		--set lr=0.0003125 lr_alpha_lambda=0.000625 freeze_last_block=true \
		--out docs/fmnist/resnet26_gn-sar-reading
	@for m in $(FMNIST_MODELS); do \
		$(FMNIST_BENCH) --model $$m --settings $(FMNIST_LONG) --seeds $(FMNIST_SEEDS) --limit 100 \
			--passes 2 --horizon 10000 --junk-length 500 --out docs/fmnist/$$m-streams || exit 1; \
	done

# The paper's protocol at its length (docs/fmnist-full/; its Table 1 also into docs/fmnist.md
# and the README's headline, between their markers): each corruption's whole test split
# (10,000 samples), 3 seeds, every shipped model; the rows that export run on RealmRuntime
# (--backend runtime), with Table 4's held-out checkpoints. MEMO, SFT and TTAug step on 64
# AugMix views a sample in the SDK (MEMO near a second a sample, the three rows about 10
# core-hours): 1,000 samples of seed 0 on the ResNet-26-GN. Tens of core-hours in all: run it
# from a detached worktree; it goes on where it stopped.
FMNIST_JOBS      ?= 2
# The models the AugMix rows run on; the page marks the others' (realm_lab.rows.VIEWS_MODELS).
FMNIST_VIEWS_MODELS ?= resnet26_gn
.PHONY: fmnist-full
fmnist-full: $(STAMP) data
	@for m in $(FMNIST_MODELS); do \
		$(BIN)/realm-lab bench quality --dataset fmnist-c --jobs $(FMNIST_JOBS) --model $$m \
			--settings episodic --seeds $(FMNIST_SEEDS) --limit 10000 --backend runtime --heldout \
			--methods $(FMNIST_ROWS) --out docs/fmnist-full/$$m || exit 1; \
	done
	@for m in $(FMNIST_VIEWS_MODELS); do \
		$(BIN)/realm-lab bench quality --dataset fmnist-c --jobs $(FMNIST_JOBS) --model $$m \
			--settings episodic --seeds 0 --limit 1000 --methods ttaug memo sft \
			--out docs/fmnist-full/$$m-views || exit 1; \
	done
	$(BIN)/realm-lab bench full-length --out docs/fmnist-full --views-models $(FMNIST_VIEWS_MODELS)

# The memory tables of docs/BENCHMARKS.md and docs/memory/, and what adapting fewer stages
# costs on Fashion-MNIST-C (docs/fmnist.md), by this one command: about an hour on two cores.
RUNTIME_PY   = .venv-runtime/bin/python
MEMORY_BENCH = $(BIN)/realm bench memory --runtime-python $(RUNTIME_PY)
.PHONY: memory-tables
memory-tables: $(STAMP) data $(RUNTIME_PY) web-deps
	$(MEMORY_BENCH) --out docs/memory
	$(MEMORY_BENCH) --models timm:mobilenetv3_large_100 resnet50_gn --adapt-stages 2 3 \
		--out docs/memory/stages-224
	$(MEMORY_BENCH) --models timm:mobilenetv3_small_100 timm:efficientnet_b0 timm:resnet18 \
		timm:mobilevit_xxs --adapt-stages 2 --out docs/memory/stages-224-more
	$(MEMORY_BENCH) --models fmnist_resnet26_gn --adapt-stages 1 2 --out docs/memory/stages-fmnist
	$(MEMORY_BENCH) --models timm:mobilenetv3_large_100 fmnist_resnet26_gn fmnist_vit_ln --node --browser \
		--out docs/memory/clients
	$(FMNIST_BENCH) --model resnet26_gn --settings episodic --seeds 0 --limit 1000 --methods realm \
		--set adapt_stages=1 --out docs/fmnist/resnet26_gn-stages1
	@for k in 1 2; do \
		$(FMNIST_BENCH) --model resnet26_gn --settings continual --seeds $(FMNIST_SEEDS) \
			--limit 100 --passes 2 --methods realm realm-guarded --set adapt_stages=$$k \
			--out docs/fmnist/resnet26_gn-stages$$k-continual || exit 1; \
	done

# The torch-free interpreter with the newest onnxruntime (the tests make and refresh it too).
$(RUNTIME_PY):
	python3 -m venv .venv-runtime
	$(RUNTIME_PY) -m pip install --quiet --disable-pip-version-check --upgrade onnxruntime '.[runtime]'

# What REALM's defaults were chosen on: the validation split (held-out training images,
# corrupted with another seed), the paper's readings and ablations side by side.
FMNIST_VAL = $(FMNIST_BENCH) --split val --settings episodic --seeds 0 --limit 500
fmnist-val: $(STAMP) data
	$(FMNIST_VAL) --methods none eta realm realm-guarded --out docs/fmnist/resnet26_gn-val
	$(FMNIST_VAL) --methods realm eta sar --set lr=0.0003125 lr_alpha_lambda=0.000625 \
		freeze_last_block=true --out docs/fmnist/resnet26_gn-val-sar-reading
	$(FMNIST_VAL) --methods realm --set lr_alpha_lambda=0.005 --out docs/fmnist/resnet26_gn-val-lr-al-same
	$(FMNIST_VAL) --methods realm --set lr_alpha_lambda=0.0005 --out docs/fmnist/resnet26_gn-val-lr-al-small
	$(FMNIST_VAL) --methods realm --set lr_alpha_lambda=5e-7 --out docs/fmnist/resnet26_gn-val-lr-al-frozen
	$(FMNIST_VAL) --methods realm --set diversity_margin=1.0 --out docs/fmnist/resnet26_gn-val-no-sdiv
	$(FMNIST_VAL) --methods realm --set loss_scale=lambda --out docs/fmnist/resnet26_gn-val-scale-lambda
	$(FMNIST_VAL) --methods realm --set freeze_last_block=true --out docs/fmnist/resnet26_gn-val-frozen-block
	$(FMNIST_VAL) --methods eta realm --set lr=0.01 lr_alpha_lambda=0.02 --out docs/fmnist/resnet26_gn-val-lr0.01
