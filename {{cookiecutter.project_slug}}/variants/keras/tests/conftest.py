"""Helpers for the Keras tests: a Vertex-free environment, tiny runs, what a drill's job logged
(the framework-free helpers are the tools': ``vertex_trainer_tools.testing``, ``.trainer_runs``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from vertex_trainer_runtime import checkpoints
from vertex_trainer_tools.testing import is_vertex_variable, read_metrics, without_vertex
from vertex_trainer_tools.trainer_runs import run_replicas

PROJECT = Path(__file__).resolve().parent.parent
# Small enough to train in about a second on one CPU core, big enough to learn.
TINY = [
    "--train-data=synthetic",
    "--eval-data=synthetic",
    "--model=small-cnn",
    "--image-size=16",
    "--synthetic-examples=64",
    "--batch-size=16",
    "--checkpoint-minutes=0",
]
# A tiny run on built-in data, also in the image (tests/test_hpt_contract.py, test_docker_image.py).
SMOKE_ARGS = [*TINY, "--epochs=2"]


def pytest_configure(config):
    # tf-keras calls random.randint(1, 1e9), deprecated in Python 3.10: not ours to fix.
    config.addinivalue_line(
        "filterwarnings", "ignore:non-integer arguments to randrange:DeprecationWarning"
    )


@pytest.fixture(autouse=True)
def vertex_free_env(monkeypatch, tmp_path):
    """No Vertex variables leak in from the shell; the hypertune file goes to tmp_path."""
    for name in list(os.environ):
        if is_vertex_variable(name):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(tmp_path / "hypertune" / "output.metrics"))


@pytest.fixture
def metrics_file(tmp_path) -> Path:
    return tmp_path / "hypertune" / "output.metrics"


def reported_epochs(path: Path) -> list[int]:
    return [int(line["global_step"]) for line in read_metrics(path)]


def resumed_at(job, replica: str = "workerpool0-0") -> tuple[int, int]:
    """(step, epochs done) of the checkpoint ``replica``'s second attempt resumed from."""
    pattern = re.compile(r"Resumed from \S+/checkpoint-(\d+) \(step \d+, (\d+) epochs done")
    lines = job.lines(replica, attempt=2)
    found = [match for match in map(pattern.search, lines) if match]
    assert found, "\n".join(lines)[-3000:]
    return int(found[0].group(1)), int(found[0].group(2))


def notice_steps(job) -> dict[str, int]:
    """The step each replica saved on a preemption notice."""
    saved = re.findall(r"^(workerpool\d-0) \| .*notice: saved checkpoint-(\d+)", job.output, re.M)
    return {replica: int(step) for replica, step in saved}


def final_step(output_dir) -> int:
    return checkpoints.latest_complete(str(output_dir / "checkpoints")).step


def train(argv: list[str]) -> int:
    """Run the trainer in this process (no TensorFlow start-up cost)."""
    import tf_keras

    from trainer import task

    tf_keras.backend.clear_session()
    return task.main(argv)


def subprocess_env(**extra: str) -> dict[str, str]:
    env = without_vertex(
        PYTHONPATH=str(PROJECT),
        TF_CPP_MIN_LOG_LEVEL="2",
        CUDA_VISIBLE_DEVICES="-1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def run_tasks(tmp_path: Path, argv: list[str], name: str, replicas: int = 2, **options) -> list:
    """``trainer_runs.run_replicas`` of this project with the environment above: ``options`` are its
    ``exit_code`` and ``code`` and further variables."""
    settings = {key: options.pop(key) for key in ("exit_code", "code") if key in options}
    env = subprocess_env(**options)
    return run_replicas(PROJECT, tmp_path, argv, name, replicas, env=env, **settings)
