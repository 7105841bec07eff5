"""What runs in each boosting round besides the tree, as ``xgb.train`` callbacks, and the helpers
that read their state. The runtime's (``vertex_trainer_runtime.xgboost``): no user edits it.

:class:`SeedEachRound` makes row and column samples a function of ``--seed`` and the round, and
:class:`ResumableEarlyStopping` carries its state in the booster's attributes, so a resumed run
ends as an uninterrupted one does. :class:`MetricReporter` logs and reports the eval metric.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import xgboost as xgb
from xgboost.callback import EarlyStopping, TrainingCallback

from vertex_trainer_runtime import hptune, tracking
from vertex_trainer_runtime.xgboost import throughput

logger = logging.getLogger(__name__)


def round_seed(seed: int, round_index: int) -> int:
    """The sampling seed of round ``round_index`` (0-based): mixed by ``SeedSequence`` so that
    runs whose seeds differ by a few share none; below 2**31, which every XGBoost build takes."""
    state = np.random.SeedSequence([seed, round_index]).generate_state(1)[0]
    return int(state) % 2**31


class SeedEachRound(TrainingCallback):
    """Seeds each round's row and column sampling from ``seed`` and the round number.

    XGBoost's sampling generator is process-wide and its column sampler is seeded once, neither
    saved in the booster, so a resumed booster would sample other rows and columns. Setting
    ``seed`` (XGBoost reseeds on a change) and reloading the booster's own configuration (a
    fresh updater and column sampler) makes each round sample what the uninterrupted run's
    round did, on every replica. Measured cost: about 0.6 ms per round.
    """

    def __init__(self, seed: int):
        super().__init__()
        self.seed = seed

    def before_iteration(self, model, epoch, evals_log) -> bool:
        model.set_param("seed", round_seed(self.seed, model.num_boosted_rounds()))
        model.load_config(model.save_config())
        return False


def samples(params: dict) -> bool:
    """Whether training draws random row or column samples (which :class:`SeedEachRound` fixes)."""
    names = ("subsample", "colsample_bytree", "colsample_bylevel", "colsample_bynode")
    return any(float(params.get(name, 1.0)) < 1 for name in names)


class ResumableEarlyStopping(EarlyStopping):
    """XGBoost's early stopping, restarted from the state the booster carries.

    ``EarlyStopping`` records ``best_iteration`` and ``best_score`` as booster attributes;
    after a resume, the rounds since the best one continue to count instead of restarting.
    """

    def __init__(self, rounds: int, metric_name: str, data_name: str):
        # save_best stays off: checkpoints need every round; the export truncates instead.
        super().__init__(rounds=rounds, metric_name=metric_name, data_name=data_name)

    def before_training(self, model):
        model = super().before_training(model)
        restored = restored_early_stopping(model)
        if restored is not None:
            best_iteration, best_score = restored
            name, metric = self.data, self.metric_name
            self.stopping_history = {name: {metric: [best_score]}}
            self.best_scores = {name: {metric: [best_score]}}
            self.current_rounds = model.num_boosted_rounds() - 1 - best_iteration
            logger.info(
                f"Early stopping resumed: best {metric}={best_score:.6g} at round "
                f"{best_iteration + 1}, {self.current_rounds} rounds since"
            )
        return model


def restored_early_stopping(booster: xgb.Booster) -> tuple[int, float] | None:
    """(best_iteration, best_score) saved in a booster by early stopping, if any."""
    iteration, score = booster.attr("best_iteration"), booster.attr("best_score")
    if iteration is None or score is None:
        return None
    return int(iteration), float(score)


class MetricReporter(TrainingCallback):
    """Log the eval metric and report it for hyperparameter tuning (and to the Experiment run)
    every ``every`` rounds, with the training speed of those rounds (``throughput``).

    Without early stopping, XGBoost is not given the eval set (scoring it after every round
    costs about 12% of training time); the metric is computed here by ``evaluate`` (the
    trainer's), every ``every`` rounds, from XGBoost's prediction cache of ``data`` (kept per
    matrix, in ``evals`` or not): each report predicts only the rounds added since the last
    one. Other rounds read nothing.
    """

    def __init__(
        self,
        reporter: hptune.MetricReporter,
        evaluate: Callable[[xgb.Booster, xgb.DMatrix, str, str], float],
        data: xgb.DMatrix,
        data_name: str,
        every: int,
        total: int,
        tracker: tracking.Tracker,
        speed: throughput.Throughput,
    ):
        super().__init__()
        self.reporter = reporter
        self.evaluate = evaluate
        self.tracker = tracker
        self.data = data
        self.data_name = data_name
        self.every = every
        self.total = total
        self.speed = speed

    def before_training(self, model):
        self.speed.start(model.num_boosted_rounds())
        return model

    def after_iteration(self, model, epoch, evals_log) -> bool:
        rounds = model.num_boosted_rounds()
        if self.every and rounds % self.every == 0:
            logged = evals_log.get(self.data_name, {}).get(self.reporter.tag)
            if logged:
                value = logged[-1][0] if isinstance(logged[-1], tuple) else logged[-1]
            else:
                with self.speed.timing("evaluation"):
                    value = self.evaluate(model, self.data, self.data_name, self.reporter.tag)
            first = self.speed.mark[1] + 1
            figures = self.speed.interval(rounds)
            tag = f"{self.data_name}-{self.reporter.tag}"
            logger.info("round %d/%d: %s=%.6g", rounds, self.total, tag, value)
            self.reporter.report(value, rounds)
            if self.reporter.enabled:  # the chief's speed
                throughput.log_interval(first, rounds, figures)
            self.tracker.log_evaluation({self.reporter.tag: value, **figures}, rounds)
        return False


def configure(booster: xgb.Booster, params: dict) -> xgb.Booster:
    """Apply training ``params`` to a loaded or sliced booster (lists: repeated keys)."""
    items = []
    for key, value in params.items():
        if isinstance(value, list):
            items.extend((key, item) for item in value)
        else:
            items.append((key, value))
    booster.set_param(items)
    return booster
