"""The ``hpt:`` section of vertex.yaml: the hyperparameter study, as pydantic models.

``config.py`` reads it with the rest of the file (``schema.py``); each parameter
reaches the trainer as ``--<id>=<value>``, and ``preflight.py`` checks the ids against the
trainer's flags, the values Vertex can pass against the trainer's parser (``trainer_args.py``)
and the metric against what the trainer reports.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, field_validator
from pydantic_core import PydanticCustomError

from vertex_trainer_tools.schema import INT32_MAX, INT64_MAX, Int, Model, cased

PARAM_TYPES = ("double", "integer", "discrete", "categorical")
SCALES = ("linear", "log", "reverse_log")
ALGORITHMS = ("random", "grid", "bayesian")
PARAM_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


def _finite(value: float) -> bool:
    """A number the API's double fields can hold (not inf, nan or an int beyond them)."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _number(value: Any) -> Any:
    if value is None or isinstance(value, int | float) and not isinstance(value, bool):
        if value is not None and not _finite(value):
            raise ValueError(f"expected a finite number, got {value}")
        return value
    raise PydanticCustomError("float_type", "expected a number")


def _scalar(value: Any) -> Any:
    if isinstance(value, dict | list):
        kind = "a mapping" if isinstance(value, dict) else "a list"
        raise ValueError(f"expected a number or text, got {kind}")
    return value


Number = Annotated[Any, BeforeValidator(_number)]


class Parameter(Model):
    """One study parameter; Vertex passes it to the trainer as ``--<id>=<value>``."""

    id: str  # its key in ``hpt.parameters``
    type: cased(str.lower, *PARAM_TYPES) = Field(examples=["double"])
    min: Number = Field(None, examples=[0.0001])
    max: Number = Field(None, examples=[0.1])
    values: tuple[Annotated[Any, AfterValidator(_scalar)], ...] = Field((), examples=["[32, 64]"])
    scale: cased(str.lower, "", *SCALES) = Field("", examples=["log"])

    def settle(self):
        settled: dict[str, Any] = {}
        if self.type != "categorical" and not self.scale:
            settled["scale"] = "linear"
        if self.type == "integer" and all(
            isinstance(v, int | float) and v == int(v) for v in (self.min, self.max)
        ):
            settled.update(min=int(self.min), max=int(self.max))
        if self.type == "categorical":
            settled["values"] = tuple(str(v) for v in self.values)
        return settled

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
            elif not all(map(_finite, self.values)):
                yield "values", "discrete values must be finite numbers (e.g. [32, 64])"
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
        elif self.type == "integer" and max(-low, high) > INT64_MAX:
            yield "", f"an integer parameter's min and max are within +-{INT64_MAX}"


class Metric(Model):
    id: str = Field(examples=["accuracy"])  # the tag the trainer reports with cloudml-hypertune
    goal: cased(str.lower, "maximize", "minimize") = Field(examples=["maximize"])

    @field_validator("id")
    @classmethod
    def _tag(cls, tag: str) -> str:
        if not tag:
            raise ValueError("empty: use the tag the trainer reports (e.g. accuracy)")
        if re.search(r"\s", tag):
            raise ValueError(f"{tag!r} has spaces: use the tag the trainer reports (e.g. accuracy)")
        return tag


PARAMETERS_EG = "learning_rate: {type: double, min: 0.0001, max: 0.1}"


def _keyed(value: Any) -> Any:
    """``id: {spec}`` pairs as parameters whose ``id`` is their key."""
    if isinstance(value, list | tuple) and value and all(isinstance(p, Parameter) for p in value):
        return value
    if not isinstance(value, dict) or not value:
        raise ValueError(f"expected a mapping of id -> spec (e.g. {PARAMETERS_EG})")
    return [
        {**(v or {}), "id": str(k)} if isinstance(v, dict | None) else v for k, v in value.items()
    ]


class HptConfig(Model):
    display_name: str = Field(examples=["my-trainer-hpt"], min_length=1)
    metric: Metric = Field(examples=["{id: accuracy, goal: maximize}"])
    parameters: Annotated[tuple[Parameter, ...], BeforeValidator(_keyed)] = Field(
        examples=[PARAMETERS_EG]
    )
    max_trial_count: Int = Field(8, ge=1, le=INT32_MAX)
    parallel_trial_count: Int = Field(2, ge=1, le=INT32_MAX)
    max_failed_trial_count: Int = Field(0, ge=0, le=INT32_MAX)
    algorithm: cased(str.lower, *ALGORITHMS) = "random"
    measurement_selection: cased(str.lower, "best", "last") = "best"
    # median: Vertex stops a trial whose best value is worse than the median of the completed
    # trials' running averages at the same step (studySpec.medianAutomatedStoppingSpec).
    early_stopping: cased(str.lower, "none", "median") = "none"

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
