"""The runtime's fixed order of an XGBoost run, with a trainer of a few lines declared here: it
calls the declared functions in order, exports, checkpoints, and a rerun
resumes from the newest checkpoint instead of training again."""

from __future__ import annotations

import dataclasses
import os
import sys
import types

import pytest

from vertex_trainer_runtime import checkpoints, cli, context, spec

xgb = pytest.importorskip("xgboost")
np = pytest.importorskip("numpy")

from vertex_trainer_runtime.xgboost import run  # noqa: E402

CALLS: list[str] = []
REPORTS: list[tuple[float, int]] = []  # (value, step) reported for tuning


class HyperTune:
    """cloudml-hypertune's reporter, recording (the framework venvs have no hypertune)."""

    def report_hyperparameter_tuning_metric(
        self, hyperparameter_metric_tag, metric_value, global_step
    ):
        REPORTS.append((metric_value, global_step))


@dataclasses.dataclass(frozen=True)
class Training:
    num_boost_round: int = 8
    early_stopping_rounds: int = 0
    checkpoint_rounds: int = 4
    report_rounds: int = 2


@dataclasses.dataclass(frozen=True)
class Flags:
    shared: cli.SharedFlags
    training: Training


def make_data(flags, cluster):
    CALLS.append("make_data")
    rng = np.random.default_rng(flags.shared.seed)
    features = rng.normal(size=(300, 4))
    return features, (features[:, 0] + 0.3 * rng.normal(size=300) > 0).astype(int)


def make_model(flags, rows, group):
    CALLS.append("make_model")
    features, labels = rows
    dtrain = xgb.DMatrix(features[:200], label=labels[:200])
    deval = xgb.DMatrix(features[200:], label=labels[200:])
    params = {"objective": "binary:logistic", "eval_metric": ["auc"], "nthread": 1}
    return run.Prepared(params, dtrain, deval, 200, "cpu", check_checkpoint, "about")


def check_checkpoint(booster):
    if booster.num_features() != 4:
        raise ValueError("not this data's booster")


def evaluate(booster, data, name, metric):
    CALLS.append("evaluate")
    text = booster.eval_set([(data, name)], iteration=booster.num_boosted_rounds() - 1)
    return float(text.rpartition(":")[2])


def export(flags, prepared, result, model_dir):
    CALLS.append("export")
    assert prepared.about == "about" and result.metric == "auc"
    os.makedirs(model_dir, exist_ok=True)
    result.booster.save_model(os.path.join(model_dir, "model.json"))


# The runtime's run, calling this module's make_data, make_model, evaluate and export.
FUNCTIONS = {name: f"{__name__}:{name}" for name in spec.FUNCTIONS}
SPEC = spec.TrainerSpec(
    Flags,
    "A demo.",
    "auc",
    "maximize",
    "model.json",
    None,
    **{**FUNCTIONS, "run": "vertex_trainer_runtime.xgboost.run:run"},
)


@pytest.fixture
def train(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "hypertune", types.SimpleNamespace(HyperTune=HyperTune))
    CALLS.clear()
    REPORTS.clear()

    def train_once(rounds: int = 8, environ: dict | None = None) -> int:
        shared = cli.SharedFlags(train_data="demo", job_dir=str(tmp_path))
        flags = Flags(shared, Training(num_boost_round=rounds))
        ctx = context.build(flags, environ={**(environ or {})}, spec=SPEC)
        return run.run(flags, ctx)

    return train_once


def test_the_order_calls_the_declared_functions_and_exports(tmp_path, train):
    assert train() == 0
    assert CALLS[:2] == ["make_data", "make_model"]
    assert CALLS[-1] == "export" and CALLS.count("export") == 1
    assert CALLS.count("evaluate") == 4 + 1  # every 2nd of 8 rounds (no eval set), then the last
    # The last measurement is the exported model's, reported last at the last round trained.
    assert [step for _, step in REPORTS] == [2, 4, 6, 8, 8]
    booster = xgb.Booster(model_file=str(tmp_path / "model" / "model.json"))
    assert booster.num_boosted_rounds() == 8
    saved = [c.step for c in checkpoints.list_checkpoints(str(tmp_path / "checkpoints"))]
    assert saved == [4, 8]
    # The format a project's older checkpoints have: the booster as checkpoint-<rounds>/model.ubj.
    assert (tmp_path / "checkpoints" / "checkpoint-8" / "model.ubj").is_file()


def test_a_rerun_resumes_from_the_newest_checkpoint(tmp_path, train, caplog):
    assert train(rounds=4) == 0
    caplog.set_level("INFO")
    assert train(rounds=8) == 0
    assert "Boosting rounds 5..8 of 8" in caplog.text
    assert train(rounds=8) == 0
    assert "All 8 rounds were done before this run" in caplog.text
