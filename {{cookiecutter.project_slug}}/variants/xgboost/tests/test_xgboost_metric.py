"""trainer/spec.py declares, without XGBoost, the metric the trainer reports: held here
against the trainer's own choice (trainer/model.py) and XGBoost's own better-is-higher rule."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import xgboost as xgb
from xgboost.callback import EarlyStopping

from trainer.spec import SPEC

# The trainer's own choice of objective kind and metric.
choice = importlib.import_module("trainer.objectives")

PROJECT = Path(__file__).resolve().parent.parent
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))
preflight = importlib.import_module("vertex_trainer_tools.preflight")
config_lib = importlib.import_module("vertex_trainer_tools.config")

OBJECTIVES = ["binary", "multiclass", "regression", "binary:hinge", "multi:softmax", "reg:tweedie"]
METRICS = ["auc", "aucpr", "error", "logloss", "rmse", "mae", "mape", "map@3", "ndcg", "pre@2"]


def xgboost_maximizes(metric: str) -> bool:
    """What XGBoost's early stopping decides for ``metric`` (its own rule, run for real)."""
    booster = xgb.train({}, xgb.DMatrix(np.zeros((4, 1)), label=np.zeros(4)), 1)
    stopping = EarlyStopping(rounds=1, metric_name=metric, data_name="eval")
    stopping.before_training(booster)
    stopping.after_iteration(booster, 0, {"eval": {metric: [0.5]}})
    return stopping.maximize


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_default_metric_per_objective_is_the_trainers(objective):
    kind = choice.objective(objective).kind
    metric, goal = SPEC.reported_metric([f"--objective={objective}"])
    assert metric == choice.metrics(None, kind)[-1]
    assert goal == ("maximize" if xgboost_maximizes(metric) else "minimize")


@pytest.mark.parametrize("metric", METRICS)
def test_eval_metric_flag_decides_the_metric_and_its_goal(metric):
    args = ["--objective", "binary", f"--eval_metric=logloss,{metric}"]
    assert SPEC.reported_metric(args) == (
        choice.metrics(f"logloss,{metric}", "binary")[-1],
        "maximize" if xgboost_maximizes(metric) else "minimize",
    )


def study(metric_id: str, goal: str, **parameters):
    data = {"display_name": "s", "metric": {"id": metric_id, "goal": goal}}
    data["parameters"] = parameters or {"eta": {"type": "double", "min": 0.01, "max": 0.3}}
    return config_lib.schema.read(config_lib.HptConfig, data, "vertex.yaml")


def test_the_study_is_checked_against_the_objective_in_job_args():
    args = ["--objective=regression"]
    assert preflight.hpt_problems(study("rmse", "minimize"), args) == []
    (problem,) = preflight.hpt_problems(study("rmse", "maximize"), args)
    assert problem == ("hpt.metric.goal", "rmse is to minimize, not maximize (e.g. goal: minimize)")
    ((key, why),) = preflight.hpt_problems(study("auc", "maximize"), args)
    assert key == "hpt.metric.id" and "reports 'rmse' (minimize) with --objective=regression" in why
    ((key, why),) = preflight.hpt_problems(study("auc", "maximize"), ["--objective=rank:ndcg"])
    assert key == "job.args" and "--objective=rank:ndcg" in why


def test_a_parameter_that_is_no_flag_is_refused_with_the_close_one():
    spec = {"type": "double", "min": 0.5, "max": 1.0}
    ((key, why),) = preflight.hpt_problems(study("auc", "maximize", sub_sample_typo=spec), [])
    assert key == "hpt.parameters.sub_sample_typo" and "(did you mean 'subsample'?)" in why
    assert preflight.hpt_problems(study("auc", "maximize", learning_rate=spec), []) == []
