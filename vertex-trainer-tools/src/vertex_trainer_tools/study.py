"""The ``hpt:`` section of vertex.yaml: the hyperparameter study, as a declared schema.

``config.py`` reads it with the rest of the file (``schema.py``); each parameter
reaches the trainer as ``--<id>=<value>``, and ``preflight.py`` checks the ids against the
trainer's flags and the metric against what the trainer reports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vertex_trainer_tools.schema import spec

PARAM_TYPES = ("double", "integer", "discrete", "categorical")
SCALES = ("linear", "log", "reverse_log")
ALGORITHMS = ("random", "grid", "bayesian")
PARAM_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Parameter:
    """One study parameter; Vertex passes it to the trainer as ``--<id>=<value>``."""

    id: str = spec(skip=True)
    type: str = spec(case="lower", choices=PARAM_TYPES, example="double")
    min: float | None = spec(None, example=0.0001)
    max: float | None = spec(None, example=0.1)
    values: tuple[Any, ...] = spec((), example="[32, 64]")
    scale: str = spec("", case="lower", choices=SCALES, blank_ok=True, example="log")

    def __post_init__(self):
        if self.type != "categorical" and not self.scale:
            object.__setattr__(self, "scale", "linear")
        if self.type == "integer" and all(
            isinstance(v, int | float) and v == int(v) for v in (self.min, self.max)
        ):
            object.__setattr__(self, "min", int(self.min))
            object.__setattr__(self, "max", int(self.max))
        if self.type == "categorical":
            object.__setattr__(self, "values", tuple(str(v) for v in self.values))

    def problems(self):
        if not PARAM_ID_RE.match(self.id):
            yield "", "a parameter id must be a flag name such as learning_rate"
        if self.type in ("double", "integer"):
            yield from self._range_problems()
        elif not self.values:
            yield "values", "expected a non-empty list (e.g. [32, 64])"
        elif self.type == "discrete":
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in self.values):
                yield "values", "discrete values must be numbers (e.g. [32, 64])"
            elif sorted(set(self.values)) != list(self.values):
                yield "values", "discrete values must be distinct and increasing (e.g. [32, 64])"
        elif self.type == "categorical":
            if self.scale:
                yield "scale", "a categorical parameter has no scale"
            if len(set(self.values)) != len(self.values):
                yield "values", "categorical values must be distinct"

    def _range_problems(self):
        low, high = self.min, self.max
        for name, value in (("min", low), ("max", high)):
            if value is None:
                yield name, f"missing for a {self.type} parameter (e.g. {name}: 1)"
        if low is None or high is None:
            return
        if low >= high:
            yield "", f"min ({low}) must be less than max ({high})"
        if self.scale != "linear" and low <= 0:
            yield "min", f"a {self.scale} scale needs min > 0 (e.g. 0.0001)"
        if self.type == "integer" and (low != int(low) or high != int(high)):
            yield "", "an integer parameter needs integer min and max"


@dataclass(frozen=True)
class Metric:
    id: str = spec(example="accuracy")  # the tag the trainer reports with cloudml-hypertune
    goal: str = spec(case="lower", choices=("maximize", "minimize"), example="maximize")

    def problems(self):
        if not self.id:
            yield "id", "empty: use the tag the trainer reports (e.g. accuracy)"
        elif re.search(r"\s", self.id):
            yield "id", f"{self.id!r} has spaces: use the tag the trainer reports (e.g. accuracy)"


@dataclass(frozen=True)
class HptConfig:
    display_name: str = spec(example="my-trainer-hpt")
    metric: Metric = spec(example="{id: accuracy, goal: maximize}")
    parameters: tuple[Parameter, ...] = spec(
        keyed="id", example="learning_rate: {type: double, min: 0.0001, max: 0.1}"
    )
    max_trial_count: int = spec(8, minimum=1)
    parallel_trial_count: int = spec(2, minimum=1)
    max_failed_trial_count: int = spec(0, minimum=0)
    algorithm: str = spec("random", case="lower", choices=ALGORITHMS)
    measurement_selection: str = spec("best", case="lower", choices=("best", "last"))

    @property
    def metric_id(self) -> str:
        return self.metric.id

    @property
    def goal(self) -> str:
        return self.metric.goal

    def problems(self):
        if self.parallel_trial_count > self.max_trial_count:
            yield "parallel_trial_count", "must not exceed max_trial_count"
        if self.algorithm == "grid" and any(p.type == "double" for p in self.parameters):
            yield "algorithm", "grid search needs integer, discrete or categorical parameters"
        flags: dict[str, str] = {}
        for p in self.parameters:  # the trainer reads --a_b and --a-b as one flag
            other = flags.setdefault(p.id.replace("_", "-"), p.id)
            if other != p.id:
                yield f"parameters.{p.id}", f"is the same trainer flag as {other!r}: keep one"
