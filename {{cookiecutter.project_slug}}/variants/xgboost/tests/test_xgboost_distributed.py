"""Two replicas on loopback, shaped like a Vertex job: one XGBoost model, exported by the chief."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pandas as pd
import pytest
from conftest import (
    FAST,
    PROJECT,
    SAMPLED,
    TIMEOUT_S,
    check_reported_auc_is_the_exported_models,
    load_model,
    run_two_replicas,
    trainer_env,
)
from vertex_trainer_runtime.xgboost import distributed, row_plan
from vertex_trainer_tools import contract, trainer_runs
from vertex_trainer_tools.testing import kill, read_metrics

from trainer import data

pytestmark = pytest.mark.distributed


def test_two_replicas_train_one_model_on_both_shards(diabetes_shards, tmp_path):
    rounds = 15
    args = [
        f"--train-data={diabetes_shards['folder']}",
        "--eval-fraction=0.2",
        "--label-column=target",
        "--objective=regression",
        f"--num-boost-round={rounds}",
        "--checkpoint-rounds=5",
        *FAST,
    ]
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
    assert not (tmp_path / "worker" / "checkpoints").exists()
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
    args = [
        "--label-column=target",
        "--num-boost-round=300",
        "--eta=0.3",
        f"--early-stopping-rounds={patience}",
        "--report-rounds=1",
        *FAST,
    ]
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


@pytest.mark.slow
def test_a_worker_whose_chief_stopped_answering_exits_within_the_grace_period(tmp_path):
    """The chief's VM gone without a TCP reset (here: the chief frozen by SIGSTOP mid-training):
    the worker's next collective call times out, so it exits, non-zero, within Compute Engine's
    30 s grace instead of waiting on for minutes; Vertex then reruns it (without
    restart_job_on_worker_restart) or the whole job (with it)."""
    args = [
        "--train-data=synthetic:1000",
        "--eval-data=synthetic:200",
        "--num-boost-round=400",
        "--checkpoint-rounds=5",
        *FAST,
    ]
    # 0.1 s rounds: the job would take 40 s, it is frozen after its first checkpoint.
    slowed = trainer_env(VERTEX_TRAINER_DRILL_STEP_SECONDS="0.1")
    processes = trainer_runs.start_two_replicas(tmp_path, args, slowed, PROJECT)
    chief, worker = processes["chief"], processes["worker"]
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not contract.marked_complete(str(tmp_path / "chief" / "checkpoints")):
            assert chief.poll() is None and worker.poll() is None, (
                tmp_path / "chief.log"
            ).read_text()
            assert time.monotonic() < deadline, "no checkpoint in time"
            time.sleep(0.05)
        os.killpg(chief.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        try:
            worker.wait(timeout=distributed.COLLECTIVE_TIMEOUT_S + 40)
        except subprocess.TimeoutExpired:
            pytest.fail("the worker outlived its frozen chief by more than a minute")
        seconds = time.monotonic() - frozen
    finally:
        kill(worker)
        kill(chief)
    log = (tmp_path / "worker.log").read_text()
    print(f"worker exited {worker.returncode} {seconds:.1f} s after its chief froze")
    assert worker.returncode not in (0, None), log[-3000:]
    assert seconds < 30, log[-3000:]


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
