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
.PHONY: help venv demo test test-packages test-variant test-runtime test-tools test-fast test-images lint clean bench

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

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

# What the suite runs. `make test FRAMEWORK=pytorch` runs the packages and one variant (FRAMEWORK
# given on the command line or in the environment; make's default above, for the demo, selects
# nothing); the template's CI runs each as a job of its own (.github/workflows/ci.yml).
VARIANT = $(if $(filter command line environment,$(origin FRAMEWORK)),$(FRAMEWORK))
# A variant's template tests in parts, for CI jobs of at most 20 minutes: its image tests
# (PART=image) and the rest (PART=rest), which splits in two again: tests/project in the demo's
# venv (PART=project) and the rest of it (PART=tiers: the demo, the project's own tiers, ...).
PART ?= all
MARK_image = images
MARK_rest = not images
MARK_project = project_checks
MARK_tiers = not images and not project_checks
PART_MARK = $(if $(MARK_$(PART)),-m "$(MARK_$(PART))")
PYTEST = $(BIN)/python -m pytest -p no:cacheprovider
# The runtime's subpackage of a variant (vertex_trainer_runtime.keras, .torch, .xgboost), its
# tests' venv (requirements/<name>.txt) and the packages every venv of the suite is held to.
RUNTIME_FRAMEWORK = $(if $(filter pytorch,$(FRAMEWORK)),torch,$(FRAMEWORK))
RUNTIME_VENV ?= build/venv-runtime-$(RUNTIME_FRAMEWORK)
RUNTIME_TESTS = vertex-trainer-runtime/tests
UV = $(BIN)/uv
UV_ENV = UV_CONSTRAINT=$(CURDIR)/tests/constraints.txt UV_INDEX_STRATEGY=unsafe-best-match \
	$(if $(PIP_FIND_LINKS),UV_FIND_LINKS="$(PIP_FIND_LINKS)") \
	$(if $(PIP_INDEX_URL),UV_INDEX_URL="$(PIP_INDEX_URL)") \
	$(if $(PIP_EXTRA_INDEX_URL),UV_EXTRA_INDEX_URL="$(PIP_EXTRA_INDEX_URL)")

test: venv lint ## the whole suite (FRAMEWORK=pytorch: the packages and that variant only)
	$(PYTEST) -n auto $(RUNTIME_TESTS)
	$(PYTEST) -n auto --durations=5 vertex-trainer-tools/tests
	$(PYTEST) -n auto --durations=12 tests $(if $(VARIANT),--variant=none --variant=$(VARIANT))

test-packages: venv lint ## CI's packages job: lint, the runtime's core and the tools' suites, the template's tests of no variant
	$(PYTEST) -n auto $(RUNTIME_TESTS)
	$(PYTEST) -n auto --durations=5 vertex-trainer-tools/tests
	$(PYTEST) -n auto --durations=12 tests --variant=none

test-variant: venv ## CI's job of one variant: its template tests (FRAMEWORK=, PART=all|image|rest|project|tiers)
	$(PYTEST) -n auto --durations=12 tests --variant=$(FRAMEWORK) $(PART_MARK)

test-runtime: venv ## the runtime's suite; FRAMEWORK=keras|pytorch|xgboost: its framework's tests in a venv of their own
ifeq ($(VARIANT),)
	$(PYTEST) -n auto $(RUNTIME_TESTS)
else
	test -x $(RUNTIME_VENV)/bin/python || $(UV) venv -q --python $(BIN)/python $(RUNTIME_VENV)
	$(UV_ENV) $(UV) pip install -q --python $(RUNTIME_VENV)/bin/python -e ./vertex-trainer-runtime \
		pytest -r $(RUNTIME_TESTS)/requirements/$(RUNTIME_FRAMEWORK).txt
	$(RUNTIME_VENV)/bin/python -m pytest -p no:cacheprovider --durations=5 \
		--framework=$(RUNTIME_FRAMEWORK) $(RUNTIME_TESTS)/test_$(RUNTIME_FRAMEWORK)_*.py
endif

test-tools: venv ## the tools package's own suite (vertex-trainer-tools/tests)
	$(PYTEST) -n auto vertex-trainer-tools/tests

test-fast: venv ## the packages' suites and the template's, less the fresh-venv runs, the images and the index
	$(PYTEST) -n auto $(RUNTIME_TESTS)
	$(PYTEST) -n auto vertex-trainer-tools/tests
	$(PYTEST) -n auto -m "not generated and not images and not index" tests

test-images: venv ## each variant's image built and trained in containers (needs Docker; root)
	$(PYTEST) -n 0 -m images tests

lint: venv ## ruff on the template's own Python and both packages; actionlint on its workflows
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .
	$(BIN)/actionlint

bench: venv ## benchmarks of the generated trainers (QUICK=1: CI-sized); see bench/README.md
	$(BIN)/python -m pip install -q -r bench/requirements.txt
	$(BIN)/python bench/run.py $(if $(filter-out 0 no false,$(QUICK)),--quick)

clean: ## remove the demo and caches
	rm -rf build .pytest_cache
