# cookiecutter-vertex-trainer: the template's own commands.
PYTHON ?= python3
VENV ?= .venv
FRAMEWORK ?= keras
DEMO_DIR ?= build/demo
BIN := $(VENV)/bin
DEMO := $(DEMO_DIR)/vertex_trainer
# The drill the generated README gives (Keras: no job restart; a step counts once every task saved it).
DRILL = KILL_AFTER=checkpoint$(if $(filter keras,$(FRAMEWORK)),, RESTART_JOB=1)

.DEFAULT_GOAL := help
.PHONY: help venv demo test test-runtime test-tools test-fast test-images lint clean bench

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(BIN)/cookiecutter: requirements-dev.txt vertex-trainer-tools/pyproject.toml vertex-trainer-runtime/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements-dev.txt
	touch $@

venv: $(BIN)/cookiecutter ## create .venv with the template's tools

# The demo installs the tools and the runtime from this checkout, named on make's command line:
# the baked project's own files name no path of this machine.
demo: venv ## bake a $(FRAMEWORK) project into $(DEMO_DIR) (replaced each time) and train it locally
	rm -rf $(DEMO_DIR)
	$(BIN)/cookiecutter . --no-input --default-config -o $(DEMO_DIR) framework=$(FRAMEWORK)
	cd $(DEMO) && $(PYTHON) -m venv .venv \
		&& PIP_CONSTRAINT=$(CURDIR)/tests/constraints.txt $(MAKE) install PYTHON=.venv/bin/python \
			TOOLS_SOURCE=$(CURDIR)/vertex-trainer-tools \
			RUNTIME_SOURCE=$(CURDIR)/vertex-trainer-runtime \
		&& $(MAKE) train-local PYTHON=.venv/bin/python
	@echo "Model exported to $(DEMO)/outputs/local/latest/model (latest: the newest job folder)"
	@echo "Next, in the demo project with the venv the demo made (or add PYTHON=.venv/bin/python):"
	@echo "  cd $(DEMO) && . .venv/bin/activate"
	@echo "  make train-local REPLICAS=2          # chief + 1 worker, a new job folder"
	@echo "  make train-local REPLICAS=2 $(DRILL)  # the preemption drill"
	@echo "  make train-local RESUME=latest       # rerun the latest job from its checkpoints"
	@echo "  make test                            # the project's own tests"
	@echo "  make submit DRY_RUN=1                # the Vertex request it would send"

test: venv lint ## the whole suite: ruff, the runtime's and the tools' tests, then bake every variant, lint it, run its tests
	$(BIN)/python -m pytest -n auto -p no:cacheprovider vertex-trainer-runtime/tests
	$(BIN)/python -m pytest -n auto --durations=5 -p no:cacheprovider vertex-trainer-tools/tests
	$(BIN)/python -m pytest -n auto --durations=12 tests

test-runtime: venv ## the runtime package's own suite (vertex-trainer-runtime/tests)
	$(BIN)/python -m pytest -n auto vertex-trainer-runtime/tests

test-tools: venv ## the tools package's own suite (vertex-trainer-tools/tests)
	$(BIN)/python -m pytest -n auto vertex-trainer-tools/tests

test-fast: venv ## the packages' suites and the template's, less the fresh-venv runs, the images and the index
	$(BIN)/python -m pytest -n auto -p no:cacheprovider vertex-trainer-runtime/tests
	$(BIN)/python -m pytest -n auto -p no:cacheprovider vertex-trainer-tools/tests
	$(BIN)/python -m pytest -n auto -m "not generated and not images and not index" tests

test-images: venv ## each variant's image built and trained in containers (needs Docker; root)
	$(BIN)/python -m pytest -n 0 -m images tests

lint: venv ## ruff on the template's own Python and both packages; actionlint on its workflows
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .
	$(BIN)/actionlint

bench: venv ## benchmarks of the generated trainers (QUICK=1: CI-sized); see bench/README.md
	$(BIN)/python -m pip install -q -r bench/requirements.txt
	$(BIN)/python bench/run.py $(if $(filter-out 0 no false,$(QUICK)),--quick)

clean: ## remove the demo and caches
	rm -rf build .pytest_cache
