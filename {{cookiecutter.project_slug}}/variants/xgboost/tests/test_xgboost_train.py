"""Train for real on tiny bundled data; the exported model.bst must load and predict well.

The first test runs the trainer as a process with a Vertex job's variables; the others call
its main in this process (``run_in_process``): what they check is what a run computes."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import numpy as np
import pytest
import yaml
from conftest import (
    FAST,
    PROJECT,
    check_ok,
    check_reported_auc_is_the_exported_models,
    features,
    load_model,
    run_trainer,
    trainer_env,
)
from vertex_trainer_runtime import cli
from vertex_trainer_tools.testing import read_metrics
from vertex_trainer_tools.trainer_runs import run_in_process

from trainer import flags, objectives
from trainer.spec import SPEC


def test_binary_csv_with_vertex_dirs_exports_a_good_model(breast_cancer, tmp_path, experiment_run):
    base = tmp_path / "job"
    env = trainer_env(
        **experiment_run.env,  # as for a job with job.experiment
        AIP_MODEL_DIR=f"{base}/model/",
        AIP_CHECKPOINT_DIR=f"{base}/checkpoints/",
        AIP_TENSORBOARD_LOG_DIR=f"{base}/logs/",
        CLOUD_ML_HP_METRIC_FILE=str(tmp_path / "hypertune" / "metrics"),
    )
    args = [f"--train-data={breast_cancer['train']}", f"--eval-data={breast_cancer['test']}"]
    args += ["--label-column=target", "--num-boost-round=30", "--report-rounds=10"]
    args += ["--checkpoint-rounds=10", *FAST]
    result = run_trainer(args, env)
    check_ok(result)

    booster, metadata = load_model(base / "model")
    assert booster.num_boosted_rounds() == 30
    assert booster.feature_names is None  # the prediction container sends plain number lists
    # A scalar 0.5 base score: what XGBoost 2.1 (the prebuilt container) reads correctly.
    learner = json.loads(booster.save_config())["learner"]["learner_model_param"]
    assert learner["base_score"] in ("5E-1", "[5E-1]")
    assert metadata["classes"] == [0, 1]
    assert metadata["objective"] == "binary:logistic"
    assert len(metadata["feature_names"]) == 30 and "target" not in metadata["feature_names"]
    test = breast_cancer["test_frame"]
    probability = booster.predict(features(test, metadata))
    accuracy = np.mean((probability > 0.5) == test["target"].to_numpy())
    assert accuracy > 0.9, accuracy

    # The tuning metric: every 10 rounds and at the end, tag = vertex.yaml's metric id.
    metrics = read_metrics(tmp_path / "hypertune" / "metrics")
    check_declared_metric(metrics, "binary")
    assert [m["global_step"] for m in metrics] == ["10", "20", "30", "30"]
    assert all(set(m) >= {"auc", "trial", "timestamp"} for m in metrics)
    assert float(metrics[-1]["auc"]) > 0.95
    assert abs(float(metrics[-1]["auc"]) - metadata["metric"]["value"]) < 1e-6
    # The Experiment run: the flags, each evaluation, the exported model's metric.
    logged = experiment_run.logged()
    assert logged["_params"]["num_boost_round"] == 30 and logged["_state"] == "COMPLETE"
    # Each evaluation comes with its rounds' speed; the last point is the whole run's speed
    # with the time spent in checkpoints (3 saves) and evaluation.
    evaluations = experiment_run.evaluations()
    assert [e["step"] for e in evaluations] == [10, 20, 30, 30]
    assert all(e["rounds_per_second"] > 0 and e["rows_per_second"] > 0 for e in evaluations)
    assert evaluations[-1]["checkpoint_seconds"] > 0 and evaluations[-1]["evaluation_seconds"] > 0
    assert logged["_metrics"]["final_auc"] == pytest.approx(metadata["metric"]["value"])
    # The same figures in the chief's log: rounds 1-10, 11-20, 21-30, then 1-30 with the totals.
    speed = re.findall(r"Speed, rounds (\d+-\d+): [\d.]+ rounds/s, \S+ rows/s, (.*)", result.stderr)
    assert [rounds for rounds, _ in speed] == ["1-10", "11-20", "21-30", "1-30"], speed
    assert re.match(r"[\d.]+ ms per round; checkpoints [\d.]+ s \(3\), evaluation", speed[-1][1])
    # Checkpoints follow the complete-marker protocol; the newest two are kept.
    kept = sorted(p.name for p in (base / "checkpoints").glob("checkpoint-*"))
    assert kept == ["checkpoint-20", "checkpoint-30"]
    assert (base / "checkpoints" / "checkpoint-30" / "COMPLETE").is_file()


def test_multiclass_text_labels_map_back_to_classes(iris, tmp_path, monkeypatch):
    metric_file = tmp_path / "metrics"
    args = [f"--train-data={iris['train']}", f"--eval-data={iris['test']}"]
    args += ["--label-column=species", "--objective=multiclass", "--num-boost-round=20"]
    args += [f"--job-dir={tmp_path / 'job'}", *FAST]
    result = run_in_process(args, monkeypatch, env={"CLOUD_ML_HP_METRIC_FILE": str(metric_file)})
    check_ok(result)
    booster, metadata = load_model(tmp_path / "job" / "model")
    assert metadata["classes"] == ["setosa", "versicolor", "virginica"]
    test = iris["test_frame"]
    probabilities = booster.predict(features(test, metadata))
    assert probabilities.shape == (len(test), 3)
    predicted = np.asarray(metadata["classes"])[probabilities.argmax(axis=1)]
    assert np.mean(predicted == test["species"].to_numpy()) > 0.85
    assert read_metrics(metric_file)[-1].keys() >= {"mlogloss", "global_step"}
    check_declared_metric(read_metrics(metric_file), "multiclass")


def test_synthetic_regression_with_vertex_style_trial_flags(tmp_path, monkeypatch):
    # Vertex appends trial values as --name=value with underscores, integers as floats, and
    # may add flags this trainer does not know.
    metric_file = tmp_path / "metrics"
    args = ["--train-data=synthetic:1500", "--eval-data=synthetic:500", "--objective=regression"]
    args += [f"--job-dir={tmp_path / 'job'}", "--num_boost_round=25.0", "--max_depth=3.0"]
    args += ["--learning_rate=0.3", "--subsample=0.9", "--some_injected_flag=1", *FAST]
    result = run_in_process(args, monkeypatch, env={"CLOUD_ML_HP_METRIC_FILE": str(metric_file)})
    check_ok(result)
    assert "Ignoring arguments" in result.stderr and "--some-injected-flag" in result.stderr
    booster, metadata = load_model(tmp_path / "job" / "model")
    assert booster.num_boosted_rounds() == 25
    assert _max_depth(booster) == 3  # --max_depth=3.0 reached the booster
    assert metadata["categories"]["color"] == ["blue", "green", "red", "yellow"]
    check_declared_metric(read_metrics(metric_file), "regression")
    last = read_metrics(metric_file)[-1]
    assert last["global_step"] == "25"
    # Much better than predicting the mean (the synthetic target's std is about 3).
    assert float(last["rmse"]) < 1.5


def check_declared_metric(reported: list[dict], flag: str) -> None:
    """METRIC_FOR_OBJECTIVE[flag] names the tag the trainer reported, and its goal is the
    direction the metric moved in as boosting rounds were added (a learnable task)."""
    name, goal = objectives.METRIC_FOR_OBJECTIVE[flag]
    assert all(
        set(line) - {"checkpoint_path", "global_step", "timestamp", "trial"} == {name}
        for line in reported
    ), reported
    first, last = float(reported[0][name]), float(reported[-1][name])
    assert (last > first) if goal == "maximize" else (last < first), (name, first, last)


def test_objectives_module_is_plain_python():
    """Config checks import it without XGBoost or numpy; every flag value maps to a metric."""
    code = (
        "import sys; from trainer import objectives as o; "
        "assert not {'xgboost', 'numpy'} & set(sys.modules), sorted(sys.modules); "
        "print(sorted(o.METRIC_FOR_OBJECTIVE.items()))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert set(objectives.METRIC_FOR_OBJECTIVE) == set(objectives.OBJECTIVES)
    assert objectives.tuning_metric("reg:tweedie") == ("rmse", "minimize")
    assert objectives.tuning_metric("binary", "logloss,aucpr") == ("aucpr", "maximize")
    assert objectives.tuning_metric("multi:softmax", "merror") == ("merror", "minimize")


def _max_depth(booster) -> int:
    """The deepest leaf's depth: the text dump indents each node by one tab per level."""
    return max(line.count("\t") for tree in booster.get_dump() for line in tree.splitlines())


def test_reported_metric_is_the_exported_models_auc(breast_cancer, tmp_path, monkeypatch):
    job = {"model": tmp_path / "model", "checkpoints": tmp_path / "ckpt"}
    job["metrics"] = tmp_path / "metrics"
    args = [f"--train-data={breast_cancer['train']}", f"--eval-data={breast_cancer['test']}"]
    args += ["--label-column=target", "--num-boost-round=300", "--eta=0.3"]
    args += ["--early-stopping-rounds=5", "--report-rounds=1", f"--model-dir={job['model']}"]
    args += [f"--checkpoint-dir={job['checkpoints']}", *FAST]
    result = run_in_process(args, monkeypatch, env={"CLOUD_ML_HP_METRIC_FILE": str(job["metrics"])})
    check_ok(result)
    check_reported_auc_is_the_exported_models(job, breast_cancer["test_frame"], "target", 5)


def test_hpt_study_matches_the_trainer():
    """vertex.yaml's study: its metric is the tag reported by default, its parameters are flags."""
    study = yaml.safe_load((PROJECT / "vertex.yaml").read_text())["hpt"]
    defaults = SPEC.parse([])
    assert defaults == flags.Flags()
    declared = objectives.tuning_metric(defaults.model.objective, defaults.training.eval_metric)
    assert (study["metric"]["id"], study["metric"]["goal"]) == declared
    assert (SPEC.metric, SPEC.goal) == declared
    section_of = {
        field.name: section
        for section in vars(defaults)
        for field in dataclasses.fields(getattr(defaults, section))
    }
    for name, spec in study["parameters"].items():
        assert name in section_of, f"hpt.parameters.{name} is no trainer flag"
        for value in spec.get("values") or [spec["min"], spec["max"]]:
            trial = SPEC.parse([f"--{name}={float(value)}"])
            parsed = getattr(getattr(trial, section_of[name]), name)
            assert parsed == pytest.approx(float(value)), name


def test_flags_parse_into_their_sections_and_become_xgboost_params():
    """Vertex-style trial flags land in the typed section that configures them, and the Model
    section alone gives XGBoost's parameters."""
    from trainer import model

    argv = ["--train-data=synthetic", "--learning_rate=0.3", "--max_depth=4.0", "--project=p"]
    argv += ["--base-score=auto", "--early-stopping-rounds=5", "--objective=multiclass"]
    parsed = SPEC.parse(argv)
    assert parsed.shared == cli.SharedFlags(train_data="synthetic")
    assert parsed.data == flags.Data(project="p")
    expected = flags.Model(objective="multiclass", eta=0.3, max_depth=4, base_score="auto")
    assert parsed.model == expected
    assert parsed.training == flags.Training(early_stopping_rounds=5)

    kind = objectives.objective(parsed.model.objective)
    params = model.params(parsed.model, kind, ["mlogloss"], 3, "cpu", 2, seed=7)
    assert params["objective"] == "multi:softprob" and params["num_class"] == 3
    assert (params["eta"], params["max_depth"], params["seed"]) == (0.3, 4, 7)
    assert "base_score" not in params  # 'auto': XGBoost estimates it
    assert model.params(flags.Model(), kind, ["auc"], 0, "cpu", 1, 42)["base_score"] == 0.5
