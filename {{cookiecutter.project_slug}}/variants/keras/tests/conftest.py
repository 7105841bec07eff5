"""Helpers for the Keras smoke tests: a Vertex-free environment, tiny runs, killable processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from vertex_trainer_tools.testing import is_vertex_variable, kill, read_metrics, without_vertex

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


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """``python -m trainer.task`` in its own process group, output to ``log``."""
    with open(log, "wb") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "trainer.task", *argv],
            cwd=PROJECT,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_all(processes: list[subprocess.Popen], timeout: float) -> list[int]:
    """Exit codes; every process still running at ``timeout`` is killed and the test fails."""
    deadline = time.monotonic() + timeout
    try:
        for process in processes:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        for process in processes:
            kill(process)
        pytest.fail(f"trainer processes still running after {timeout:.0f} s; killed")
    return [process.returncode for process in processes]
