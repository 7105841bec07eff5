"""``vertex_trainer_runtime.context`` (every variant's, plain Python): ``task.main`` hands
``run`` one context with the replica's role, its output dirs as file paths and a reporter.
The variant's side of the contract is checked in each generated project (tests/test_task.py)."""

from __future__ import annotations

import dataclasses

import pytest
from vertex_trainer_tools.testing import cluster_spec

from vertex_trainer_runtime import cli, context, runtime

NO_MOUNT = "gs://no-such-bucket-mounted-here"


@dataclasses.dataclass(frozen=True)
class Flags:
    shared: cli.SharedFlags


def parsed(*argv: str) -> Flags:
    return cli.parse(Flags, "test", argv)


def test_context_reads_vertex_once(tmp_path):
    environ = {
        "AIP_MODEL_DIR": f"{tmp_path}/1/model/",
        "AIP_CHECKPOINT_DIR": f"{tmp_path}/1/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": f"{tmp_path}/1/logs/",
        "CLUSTER_SPEC": cluster_spec(
            {"workerpool0": ["10.0.0.1:2222"], "workerpool1": ["10.0.0.2:2222"]}, "workerpool1"
        ),
    }
    ctx = context.build(parsed(), environ)
    assert ctx.model_dir.local() == f"{tmp_path}/1/model"  # Vertex's trailing slash dropped
    assert ctx.checkpoint_dir.local() == f"{tmp_path}/1/checkpoints"
    assert str(ctx.tensorboard_dir) == f"{tmp_path}/1/logs"
    assert (ctx.cluster.pool, ctx.cluster.node_rank, ctx.cluster.num_nodes) == ("workerpool1", 1, 2)
    assert not ctx.metric_reporter("auc").enabled  # a worker never writes the metric file


def test_flags_win_over_vertex_and_job_dir_is_the_fallback(tmp_path):
    ctx = context.build(parsed(f"--job-dir={tmp_path}", "--model-dir=elsewhere"), {})
    assert ctx.model_dir.uri == "elsewhere"
    assert ctx.checkpoint_dir.local() == runtime.join(str(tmp_path), "checkpoints")
    assert ctx.cluster.is_chief


def test_gs_uri_without_the_gcs_mount_is_bad_input_only_when_a_file_is_written():
    ctx = context.build(parsed(f"--job-dir={NO_MOUNT}/job"), {})
    assert ctx.tensorboard_dir.uri == f"{NO_MOUNT}/job/logs"  # TensorFlow may write it itself
    assert ctx.tensorboard_dir.path is None
    with pytest.raises(cli.InputError, match="/gcs/no-such-bucket-mounted-here"):
        ctx.checkpoint_dir.local()
