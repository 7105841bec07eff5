"""Two replicas on loopback, shaped like a Vertex job: one XGBoost model, exported by the chief."""

from __future__ import annotations

import time

import pandas as pd
import pytest
from conftest import (
    FAST,
    TIMEOUT_S,
    check_reported_auc_is_the_exported_models,
    load_model,
    start_trainer,
    trainer_env,
)
from vertex_trainer_tools.testing import cluster_spec, free_ports, kill, read_metrics

from trainer import data

pytestmark = pytest.mark.distributed


def run_two_replicas(tmp_path, args: list[str]) -> dict[str, str]:
    """A chief and a worker with Vertex-shaped ``CLUSTER_SPEC``s; their logs once both exit 0.

    Each writes under ``tmp_path/<chief|worker>/`` (model, checkpoints, metrics).
    """
    chief, worker = free_ports(2)
    pools = {"workerpool0": [f"127.0.0.1:{chief}"], "workerpool1": [f"127.0.0.1:{worker}"]}
    processes = {}
    for name, pool in (("chief", "workerpool0"), ("worker", "workerpool1")):
        env = trainer_env(
            CLUSTER_SPEC=cluster_spec(pools, pool, 0),
            CLOUD_ML_JOB_ID="4711",
            CLOUD_ML_HP_METRIC_FILE=str(tmp_path / name / "metrics"),
        )
        outputs = [
            f"--model-dir={tmp_path / name / 'model'}",
            f"--checkpoint-dir={tmp_path / name / 'checkpoints'}",
        ]
        processes[name] = start_trainer([*args, *outputs], env, log=tmp_path / f"{name}.log")
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while any(p.poll() is None for p in processes.values()):
            assert time.monotonic() < deadline, "distributed run did not finish in time"
            time.sleep(0.1)
    finally:
        for process in processes.values():
            kill(process)
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in processes}
    for name, process in processes.items():
        assert process.returncode == 0, f"{name}:\n{logs[name][-3000:]}"
    assert "rank 0 of 2" in logs["chief"] and "rank 1 of 2" in logs["worker"]
    return logs


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
    assert "1 of 2 files" in logs["chief"] and "1 of 2 files" in logs["worker"]

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
    total = diabetes_shards["rows"]
    held_out = round(total / 2 * 0.2) * 2  # each replica holds out 20% of its own rows
    assert root_cover == pytest.approx(total - held_out)


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
        # The rows each replica holds out (the trainer's seeded split of its own file).
        shards = [data.split_off_eval(shard.reset_index(drop=True), 0.3, 42)[1] for shard in shards]
    else:
        args += [f"--train-data={breast_cancer['train']}", f"--eval-data={parts}"]
    logs = run_two_replicas(tmp_path, args)
    chief = tmp_path / "chief"
    job = {"model": chief / "model", "checkpoints": chief / "checkpoints"}
    job["metrics"] = chief / "metrics"
    check_reported_auc_is_the_exported_models(job, pd.concat(shards), "target", patience)
    assert f"{sum(len(s) for s in shards)} eval rows (on every replica)" in logs["worker"]
