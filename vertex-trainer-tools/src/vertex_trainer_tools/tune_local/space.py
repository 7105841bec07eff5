"""The study's search space: each trial's values, chosen as Vertex's three algorithms choose.

- ``random``: ``local_run.job.trial_values``, so trial k of a local study has the values that
  ``make train-local HPT_TRIAL=k`` gives (reproducible, as the emulator's trial runs are).
- ``grid``: every combination once, the first parameter changing fastest (OSS Vizier's order).
  Optuna's GridSampler is not used: with ask/tell and two trials in flight it can suggest one
  point twice, and its last ``tell`` raises.
- ``bayesian`` (Vertex's default, Vizier's Gaussian process bandit, whose code is unpublished):
  Optuna's TPE, multivariate, with the constant liar for trials still running. The study's
  finished trials are replayed into an in-memory Optuna study before each suggestion, so the
  study folder's journal stays the one record and nothing of Optuna's is stored.

Values are strings formatted as Vertex sends them: INTEGER as ints, DOUBLE and DISCRETE as
floats (``64.0``), CATEGORICAL as the text.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

from vertex_trainer_tools.local_run.job import trial_values

# TPE's suggestions are random until this share of the budget has finished (at least 2, at most
# Optuna's default 10): Vizier too starts from spread-out trials before it models the metric.
STARTUP_SHARE = 3


def vertex_value(parameter, value) -> str:
    """``value`` as Vertex would pass ``--<id>=`` for this parameter."""
    if parameter.type == "integer":
        return str(int(value))
    if parameter.type in ("double", "discrete"):
        return repr(float(value))
    return str(value)


def grid_points(parameters: Sequence) -> list[dict[str, str]]:
    """Every combination of the parameters' values, the first parameter changing fastest."""
    axes = []
    for parameter in parameters:
        if parameter.type == "integer":
            values = range(int(parameter.min), int(parameter.max) + 1)
        else:
            values = parameter.values
        axes.append([vertex_value(parameter, value) for value in values])
    ids = [parameter.id for parameter in parameters]
    # itertools.product varies the last axis fastest: reverse the axes, then the tuples.
    points = itertools.product(*reversed(axes))
    return [dict(zip(ids, reversed(point), strict=True)) for point in points]


def grid_size(parameters: Sequence) -> int:
    size = 1
    for parameter in parameters:
        if parameter.type == "integer":
            size *= int(parameter.max) - int(parameter.min) + 1
        else:
            size *= len(parameter.values)
    return size


class Suggester:
    """The values of each new trial of ``hpt`` (``study.HptConfig``)."""

    def __init__(self, hpt, seed: int = 0):
        self.hpt = hpt
        self.seed = seed
        self._grid: list[dict[str, str]] | None = None

    def capacity(self) -> int | None:
        """How many distinct trials the algorithm has (a grid's size), None for no limit."""
        return grid_size(self.hpt.parameters) if self.hpt.algorithm == "grid" else None

    def suggest(self, trial: int, history: Sequence[Mapping]) -> dict[str, str] | None:
        """Values for trial number ``trial`` (from 1); None once a grid is exhausted.

        ``history``: the other trials, each ``{"values", "state", "final"}`` where state is
        SUCCEEDED, STOPPED, FAILED or ACTIVE (running) and final the metric or None.
        """
        algorithm = self.hpt.algorithm
        if algorithm == "random":
            return trial_values(self.hpt.parameters, trial)
        if algorithm == "grid":
            if self._grid is None:
                self._grid = grid_points(self.hpt.parameters)
            return self._grid[trial - 1] if trial <= len(self._grid) else None
        return self._bayesian(trial, history)

    def _bayesian(self, trial: int, history: Sequence[Mapping]) -> dict[str, str]:
        import optuna  # only for the Bayesian algorithm: a third of a second to import
        from optuna.trial import TrialState, create_trial

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        startup = max(2, min(10, self.hpt.max_trial_count // STARTUP_SHARE))
        sampler = optuna.samplers.TPESampler(
            seed=self.seed * 100_003 + trial,
            multivariate=True,
            constant_liar=True,
            n_startup_trials=startup,
        )
        direction = "maximize" if self.hpt.goal == "maximize" else "minimize"
        study = optuna.create_study(direction=direction, sampler=sampler)
        distributions = {p.id: _distribution(p) for p in self.hpt.parameters}
        for past in history:
            params = {p.id: _internal(p, past["values"][p.id]) for p in self.hpt.parameters}
            if past["state"] in ("SUCCEEDED", "STOPPED") and past.get("final") is not None:
                state, value = TrialState.COMPLETE, float(past["final"])
            elif past["state"] == "ACTIVE":
                state, value = TrialState.RUNNING, None
            else:
                state, value = TrialState.FAIL, None
            study.add_trial(
                create_trial(params=params, distributions=distributions, state=state, value=value)
            )
        asked = study.ask(distributions)
        return {p.id: _external(p, asked.params[p.id]) for p in self.hpt.parameters}


# Optuna has no reverse-log scale: such a parameter is searched as ``min + max - x`` on a log
# scale (dense near max, as Vertex's UNIT_REVERSE_LOG_SCALE), and a discrete one by the index of
# its value, so that TPE sees the values' order.


def _distribution(parameter):
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    log = parameter.scale in ("log", "reverse_log")
    if parameter.type == "double":
        return FloatDistribution(float(parameter.min), float(parameter.max), log=log)
    if parameter.type == "integer":
        return IntDistribution(int(parameter.min), int(parameter.max), log=log)
    if parameter.type == "discrete":
        return IntDistribution(0, len(parameter.values) - 1)
    return CategoricalDistribution(list(parameter.values))


def _internal(parameter, text: str):
    if parameter.type == "categorical":
        return text
    if parameter.type == "discrete":
        numbers = [float(value) for value in parameter.values]
        return min(range(len(numbers)), key=lambda i: abs(numbers[i] - float(text)))
    value = float(text) if parameter.type == "double" else int(float(text))
    return _mirror(parameter, value)


def _external(parameter, internal) -> str:
    if parameter.type == "discrete":
        return vertex_value(parameter, parameter.values[int(internal)])
    if parameter.type == "categorical":
        return str(internal)
    value = _mirror(parameter, internal)
    if parameter.type == "double":
        value = float(f"{value:.6g}")
        value = min(float(parameter.max), max(float(parameter.min), value))
    return vertex_value(parameter, value)


def _mirror(parameter, value):
    """``min + max - value`` for a reverse-log parameter (its own inverse), else ``value``."""
    if parameter.scale != "reverse_log":
        return value
    mirrored = parameter.min + parameter.max - value
    return int(mirrored) if parameter.type == "integer" else mirrored


def finite(text) -> float | None:
    """The metric as a finite float, None when it is not one (``nan``, ``inf``, garbage)."""
    try:
        number = float(text)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
