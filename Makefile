# cookiecutter-vertex-trainer: the template's own commands.
PYTHON ?= python3
VENV ?= .venv
FRAMEWORK ?= keras
DEMO_DIR ?= build/demo
BIN := $(VENV)/bin

.DEFAULT_GOAL := help
.PHONY: help venv demo test test-fast test-images lint clean bench

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(BIN)/cookiecutter: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements-dev.txt
	touch $@

venv: $(BIN)/cookiecutter ## create .venv with the template's tools

demo: venv ## bake a $(FRAMEWORK) project with defaults and train it locally on synthetic data
	rm -rf $(DEMO_DIR)
	$(BIN)/cookiecutter . --no-input --default-config -o $(DEMO_DIR) framework=$(FRAMEWORK)
	cd $(DEMO_DIR)/vertex_trainer && $(PYTHON) -m venv .venv \
		&& PIP_CONSTRAINT=$(CURDIR)/tests/constraints.txt $(MAKE) install PYTHON=.venv/bin/python \
		&& $(MAKE) train-local PYTHON=.venv/bin/python
	@echo "Model exported to $(DEMO_DIR)/vertex_trainer/outputs/local/model"

test: venv ## the whole suite: bake every variant, lint it, run its own tests in a fresh venv
	$(BIN)/python -m pytest -n auto tests

test-fast: venv ## everything but the fresh-venv runs and the Docker image tests
	$(BIN)/python -m pytest -n auto -m "not generated and not images" tests

test-images: venv ## each variant's image built and trained in containers (needs Docker; root)
	$(BIN)/python -m pytest -n 0 -m images tests

lint: venv ## ruff on the template's own Python
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .

bench: venv ## benchmarks of the generated trainers (QUICK=1: CI-sized); see bench/README.md
	$(BIN)/python -m pip install -q -r bench/requirements.txt
	$(BIN)/python bench/run.py $(if $(filter-out 0 no false,$(QUICK)),--quick)

clean: ## remove the demo and caches
	rm -rf build .pytest_cache
