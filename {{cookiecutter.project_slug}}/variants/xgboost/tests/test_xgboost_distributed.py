"""Two replicas on loopback, shaped like a Vertex job: one XGBoost model, exported by the chief.
(A worker whose chief froze: the runtime's tests/test_xgboost_distributed.py.)"""

from __future__ import annotations

import re

import pandas as pd
import pytest
from conftest import (
    FAST,
    SAMPLED,
    check_reported_auc_is_the_exported_models,
    load_model,
    run_two_replicas,
)
from vertex_trainer_runtime.xgboost import row_plan
from vertex_trainer_tools.testing import read_metrics

from trainer import data

pytestmark = pytest.mark.distributed


def test_two_replicas_train_one_model_on_both_shards(diabetes_shards, tmp_path):
    rounds = 15
    args = [f"--train-data={diabetes_shards['folder']}", "--eval-fraction=0.2"]
    args += ["--label-column=target", "--objective=regression", f"--num-boost-round={rounds}"]
    args += ["--checkpoint-rounds=5", *FAST]
    logs = run_two_replicas(tmp_path, args)
    # Two even ranges of all rows, the held-out ones (20%, chosen from all) left aside ...
    total = diabetes_shards["rows"]
    plan = row_plan.RowPlan(total, 0.2, 42)
    half = plan.range_of(0, 2)[1]
    assert abs(half - total / 2) < 0.1 * total
    assert f"rows 0..{half} of {total} (in 2 files) for replica 0 of 2" in logs["chief"]
    assert f"rows {half}..{total} of {total} (in 2 files) for replica 1" in logs["worker"]
    # ... holding the same number of training rows (within one), none dropped or repeated.
    training = total - plan.held_out_rows
    pattern = rf"Data: {training} training rows \(this replica: (\d+)\)"
    shares = [int(re.search(pattern, logs[name]).group(1)) for name in ("chief", "worker")]
    assert sum(shares) == training and abs(shares[0] - shares[1]) <= 1, shares

    # Only the chief exports, checkpoints and reports the tuning metric.
    booster, metadata = load_model(tmp_path / "chief" / "model")
    assert booster.num_boosted_rounds() == rounds
    assert not (tmp_path / "worker" / "model").exists()
    assert not list((tmp_path / "worker" / "checkpoints").glob("checkpoint-*"))
    assert not (tmp_path / "worker" / "metrics").exists()
    assert read_metrics(tmp_path / "chief" / "metrics")[-1]["global_step"] == str(rounds)

    # The trees saw both shards: with squared error every row adds 1 to the root's cover,
    # so the first tree's root covers all training rows of both replicas.
    trees = booster.trees_to_dataframe()
    root_cover = trees[(trees["Tree"] == 0) & (trees["Node"] == 0)]["Cover"].item()
    assert root_cover == pytest.approx(training)


@pytest.mark.slow
@pytest.mark.parametrize("eval_rows", ["eval files", "held out"])
def test_two_replicas_report_the_auc_of_all_eval_rows(breast_cancer, tmp_path, eval_rows):
    """Replicas whose eval rows differ (files split by a feature tied to the label, one per
    replica): the reported AUC, the early stop and the export are those of all eval rows."""
    test = breast_cancer["test_frame"]
    if eval_rows == "held out":  # each replica holds out rows of its own training file
        test = pd.read_csv(breast_cancer["train"])
    parts = tmp_path / "parts"
    parts.mkdir()
    large = test["worst radius"] > test["worst radius"].median()
    shards = [test[~large], test[large]]
    for index, shard in enumerate(shards):
        shard.to_csv(parts / f"part-{index}.csv", index=False)
    patience = 5
    args = ["--label-column=target", "--num-boost-round=300", "--eta=0.3"]
    args += [f"--early-stopping-rounds={patience}", "--report-rounds=1", *FAST]
    if eval_rows == "held out":
        args += [f"--train-data={parts}", "--eval-fraction=0.3"]
        # The rows held out: the same on any replica count, so those of one replica's read.
        rows, held_out = data.read_rows(
            str(parts), "train", label_column="target", kind="binary", hold_out=0.3
        )
        shards = [rows[held_out]]
    else:
        args += [f"--train-data={breast_cancer['train']}", f"--eval-data={parts}"]
    logs = run_two_replicas(tmp_path, args)
    chief = tmp_path / "chief"
    job = {"model": chief / "model", "checkpoints": chief / "checkpoints"}
    job["metrics"] = chief / "metrics"
    check_reported_auc_is_the_exported_models(job, pd.concat(shards), "target", patience)
    assert f"{sum(len(s) for s in shards)} eval rows (on every replica)" in logs["worker"]


def test_sampled_run_on_two_replicas_resumes_to_the_same_trees(tmp_path):
    """Run 12 rounds, rerun with 30: the trees of 30 uninterrupted rounds (test_xgboost_resume)."""
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    whole.mkdir()
    parts.mkdir()
    run_two_replicas(whole, [*SAMPLED, "--num-boost-round=30"])
    run_two_replicas(parts, [*SAMPLED, "--num-boost-round=12"])
    logs = run_two_replicas(parts, [*SAMPLED, "--num-boost-round=30"])
    assert "12 rounds done" in logs["chief"]
    trees = [load_model(f / "chief" / "model")[0].get_dump(with_stats=True) for f in (whole, parts)]
    assert trees[0] == trees[1]
