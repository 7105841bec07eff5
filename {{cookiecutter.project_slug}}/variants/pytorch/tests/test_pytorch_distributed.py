"""Two Vertex-shaped replicas on loopback train one DDP job (gloo); only rank 0 writes."""

from __future__ import annotations

import json

import pytest
from conftest import base_args, start, wait
from vertex_trainer_runtime import checkpoints, cli, runtime
from vertex_trainer_tools.testing import cluster_spec, free_ports, kill, read_metrics

from trainer import distributed, flags

pytestmark = pytest.mark.distributed


def _cluster_spec(pool: str, port0: int, port1: int) -> str:
    hosts = {"workerpool0": [f"127.0.0.1:{port0}"], "workerpool1": [f"127.0.0.1:{port1}"]}
    return cluster_spec(hosts, pool)


def test_plan_from_cluster_spec():
    spec = json.loads(_cluster_spec("workerpool1", 2222, 2222))
    spec["cluster"]["workerpool2"] = ["reduction-server:2222"]  # never a rank
    cluster = runtime.cluster_from_env({"CLUSTER_SPEC": json.dumps(spec)})
    plan = distributed.plan(cluster, nproc_per_node=0)
    assert (plan.nnodes, plan.node_rank, plan.master) == (2, 1, ("127.0.0.1", 2222))
    assert plan.nproc_per_node >= 1


def test_two_replicas_train_one_ddp_job(tiny_bert, csv_data, tmp_path):
    port0, port1 = free_ports(2)
    argv = [
        *base_args(tiny_bert, csv_data, tmp_path / "unused"),
        "--epochs=1",
        "--max-train-samples=128",
        "--max-eval-samples=32",
    ]
    processes = []
    for node, pool in enumerate(("workerpool0", "workerpool1")):
        base = tmp_path / f"node{node}"
        env = dict(
            CLUSTER_SPEC=_cluster_spec(pool, port0, port1),
            AIP_MODEL_DIR=f"{base}/model/",  # different per node only to see who writes
            AIP_CHECKPOINT_DIR=f"{tmp_path}/checkpoints/",
            AIP_TENSORBOARD_LOG_DIR=f"{base}/logs/",
            CLOUD_ML_HP_METRIC_FILE=str(base / "hypertune" / "metrics.json"),
            # What Vertex sets on multi-node jobs: node counts, which must not be used as-is.
            WORLD_SIZE="2",
            RANK=str(node),
            OMP_NUM_THREADS="1",
        )
        processes.append(start(argv, tmp_path / f"node{node}.log", **env))
    try:
        codes = [wait(process, timeout=300) for process in processes]
    finally:
        for process in processes:
            kill(process)
    logs = [(tmp_path / f"node{node}.log").read_text() for node in (0, 1)]
    assert codes == [0, 0], logs[0][-3000:] + "\n-----\n" + logs[1][-3000:]

    # One job of 2 processes: 128 examples / (2 x 16) = 4 steps, not 8 per process.
    assert "Processes: 2" in logs[0]
    records = read_metrics(tmp_path / "node0" / "hypertune" / "metrics.json")
    assert [int(r["global_step"]) for r in records] == [4]
    assert read_metrics(tmp_path / "node1" / "hypertune" / "metrics.json") == []

    # Only rank 0 exports; the other replica leaves its model dir alone.
    assert (tmp_path / "node0" / "model" / "model.safetensors").is_file()
    assert not (tmp_path / "node1" / "model").exists()

    # The loss is averaged, not summed, over processes: ln 2 ~ 0.69 for two balanced classes.
    state_path = tmp_path / "checkpoints" / "checkpoint-4" / "trainer_state.json"
    state = json.loads(state_path.read_text())
    first_loss = next(entry["loss"] for entry in state["log_history"] if "loss" in entry)
    assert 0.55 < first_loss < 0.85, f"first loss {first_loss}: scaled by the process count?"


def _parse(argv: list[str]) -> flags.Flags:
    return cli.parse(flags.Flags, flags.DESCRIPTION, argv)


def test_workers_get_the_command_line_as_given():
    """Flags that argparse cannot spell back from the parsed values reach the workers."""
    given = ["--no-group-by-length", "--model_name_or_path", "scratch", "--epochs=2"]
    argv = distributed.worker_argv(["--local-dir=/node", "--model-name-or-path=/node/m"], given)
    worker = _parse(argv)
    assert worker.data.group_by_length is False
    assert worker.distributed.local_dir == "/node"
    assert (worker.model.model_name_or_path, worker.training.epochs) == ("/node/m", 2)


@pytest.mark.slow
def test_no_group_by_length_reaches_the_torchrun_workers(tiny_bert, csv_data, tmp_path):
    """Two processes on one replica; each worker saved the TrainingArguments it trained with."""
    import torch

    argv = [
        *base_args(tiny_bert, csv_data, tmp_path / "job"),
        "--nproc-per-node=2",
        "--no-group-by-length",
        "--max-steps=2",
        "--save-steps=2",
        "--max-train-samples=64",
        "--max-eval-samples=16",
    ]
    process = start(argv, tmp_path / "run.log", OMP_NUM_THREADS="1")
    code = wait(process, timeout=300)
    log = (tmp_path / "run.log").read_text()
    assert code == 0, log[-3000:]
    assert "Processes: 2" in log
    latest = checkpoints.latest_complete(str(tmp_path / "job" / "checkpoints"))
    worker_args = torch.load(f"{latest.path}/training_args.bin", weights_only=False)
    assert worker_args.world_size == 2
    assert getattr(worker_args, "train_sampling_strategy", "random") != "group_by_length"
    assert not getattr(worker_args, "group_by_length", False)
