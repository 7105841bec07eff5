"""A trainer's declaration: one typed object, ``SPEC`` in the variant's ``trainer/spec.py``.

It says what the runtime and the tools need to know of a trainer: its flags (the ``Flags``
dataclass of sections, whose annotations are resolved here, so a flags module may use any
import style), ``--help``'s description, the tuning metric and its goal, why a Reduction Server
is of no use to it, the file its export holds, and its functions as ``"module:function"``
names. The names are resolved only when called: the tools import the declaration without the
ML framework (``make check``), and ``trainer/task.py`` hands it to ``task.main``, which resolves
``run``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from vertex_trainer_runtime import cli

GOALS = ("maximize", "minimize")  # hpt.metric.goal, lower case
FUNCTIONS = ("run", "make_data", "make_model", "evaluate", "export")  # the named functions
# Named where a framework's run calls them (None: not declared).
OPTIONAL_FUNCTIONS = ("training_arguments", "tokenize", "worker_flags")


@dataclasses.dataclass(frozen=True)
class TrainerSpec:
    """What a variant's trainer is, for the runtime and the tools (framework-free)."""

    flags: type  # a frozen dataclass of sections; its ``shared`` one is cli.SharedFlags
    description: str  # the --help text
    metric: str  # the tuning metric id with the default flags: vertex.yaml's hpt.metric.id
    goal: str  # "maximize" or "minimize"
    export_file: str  # a file the export holds: `make check` matches model.serving_image to it
    # Why job.reduction_server is of no use to this trainer (`make check` refuses it); None: it is.
    no_reduction_server: str | None
    run: str  # "module:function" called as run(flags, ctx): train, report, export
    make_data: str  # builds the training and evaluation data from the flags
    make_model: str  # builds the model
    evaluate: str  # computes the tuning metric on the evaluation data
    export: str  # writes the model to the model dir
    # The metric when it follows the flags (XGBoost: --objective, --eval-metric): parsed flags
    # -> (metric id, goal); None: always (metric, goal).
    metric_for: Callable[[Any], tuple[str, str]] | None = None
    # Further "module:function" names a framework's run calls where it has them (None: none).
    # PyTorch: (flags, output dir) -> transformers' TrainingArguments
    training_arguments: str | None = None
    # PyTorch: (flags, make_data's data, tokenizer) -> the (train, eval) sets the model takes
    tokenize: str | None = None
    # PyTorch: (flags, make_data's data, node's work dir) -> flags added to the torchrun
    # workers' command line, after what the node prepared for them before they start
    worker_flags: str | None = None

    def __post_init__(self):
        # Resolved now, while the declaring modules are importable: the tools drop them from
        # sys.modules after reading the declaration. (Flags that are no dataclass: problems().)
        if dataclasses.is_dataclass(self.flags):
            cli.resolve_annotations(self.flags)

    def parser(self) -> argparse.ArgumentParser:
        """``python -m trainer.task``'s whole command line: the shared flags, then the trainer's."""
        return cli.parser_for(self.flags, self.description)

    def parse(self, argv: Sequence[str] | None = None) -> Any:
        """Vertex-style ``argv`` parsed into the ``Flags`` dataclass (``sys.argv`` by default)."""
        return cli.parse(self.flags, self.description, argv)

    def reported_metric(self, argv: Sequence[str]) -> tuple[str, str]:
        """``(metric id, goal)`` the trainer reports when run with ``argv``; raises
        ``cli.InputError`` for flags it refuses, ``SystemExit`` for ones it cannot parse."""
        if self.metric_for is None:
            return self.metric, self.goal  # whatever the flags
        return self.metric_for(self.parse(list(argv)))

    def function(self, name: str) -> Callable:
        """One of :data:`FUNCTIONS` or :data:`OPTIONAL_FUNCTIONS`, imported (with the framework, for
        most); a ``LookupError`` for an optional one the declaration leaves out."""
        reference = getattr(self, name)
        if reference is None:
            raise LookupError(f"trainer/spec.py declares no {name}")
        return resolve(reference)


def resolve(reference: str) -> Callable:
    """``"package.module:function"`` -> the function."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def problems(spec: Any) -> list[str]:
    """Where a declaration breaks the contract, without importing the framework; empty if none."""
    if not isinstance(spec, TrainerSpec):
        return ["trainer/spec.py: SPEC is not a vertex_trainer_runtime.spec.TrainerSpec"]
    found = []
    if not dataclasses.is_dataclass(spec.flags):
        return ["trainer/spec.py: flags is not a dataclass"]
    sections = cli.sections(spec.flags)
    if sections.get("shared") is not cli.SharedFlags:
        found.append("trainer/spec.py: flags has no 'shared: cli.SharedFlags' section")
    for name, section in sections.items():
        if not (dataclasses.is_dataclass(section) and section.__dataclass_params__.frozen):
            found.append(f"trainer/spec.py: flags.{name} is not a frozen dataclass")
    if spec.goal not in GOALS:
        found.append(f"trainer/spec.py: goal {spec.goal!r} is not one of {', '.join(GOALS)}")
    for name in FUNCTIONS + OPTIONAL_FUNCTIONS:
        if name in OPTIONAL_FUNCTIONS and getattr(spec, name) is None:
            continue
        module, colon, function = getattr(spec, name).partition(":")
        if not (colon and module and function.isidentifier()):
            found.append(f"trainer/spec.py: {name} is not 'module:function'")
    return found


def run_problems(spec: TrainerSpec) -> list[str]:
    """:func:`problems`, and whether ``run`` takes ``(flags, ctx)`` (imports the framework)."""
    found = problems(spec)
    if found:
        return found
    try:
        run = spec.function("run")
    except (ImportError, AttributeError) as error:
        return [f"trainer/spec.py: run {spec.run!r} does not resolve: {error}"]
    if len(inspect.signature(run).parameters) != 2:
        found.append(f"{spec.run} takes (flags, ctx)")
    return found
