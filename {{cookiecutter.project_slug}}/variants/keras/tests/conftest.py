"""Helpers for the Keras smoke tests: a Vertex-free environment, tiny runs, killable processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from vertex_trainer_runtime import checkpoints, vertex_env
from vertex_trainer_tools.testing import (
    free_ports,
    is_vertex_variable,
    kill,
    read_metrics,
    without_vertex,
)

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


@pytest.fixture
def with_hooks(tmp_path):
    """``with_hooks(code, **variables)``: variables for the trainer's processes that load
    ``code`` into each as ``sitecustomize`` (test-only hooks, acting on their variables)."""

    def env(code: str, **variables) -> dict[str, str]:
        folder = tmp_path / "hooks"
        folder.mkdir(exist_ok=True)
        (folder / "sitecustomize.py").write_text(code)
        path = [str(folder), str(PROJECT), os.environ.get("PYTHONPATH", "")]
        return {"PYTHONPATH": os.pathsep.join(filter(None, path)), **variables}

    return env


def resumed_at(job, replica: str = "workerpool0-0") -> tuple[int, int]:
    """(step, epochs done) of the checkpoint ``replica``'s second attempt resumed from."""
    pattern = re.compile(r"Resumed from \S+/checkpoint-(\d+) \(step \d+, (\d+) epochs done")
    lines = job.lines(replica, attempt=2)
    found = [match for match in map(pattern.search, lines) if match]
    assert found, "\n".join(lines)[-3000:]
    return int(found[0].group(1)), int(found[0].group(2))


def exited_after_drill(job, replica: str) -> float:
    """Seconds from the drill's signal to another replica until ``replica`` exited."""
    found = re.search(rf"kill drill: {replica} exited -?\d+ ([\d.]+)s after the SIG", job.output)
    assert found, job.tail()
    return float(found.group(1))


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


def start(argv: list[str], env: dict[str, str], log: Path, code: str = "") -> subprocess.Popen:
    """``python -m trainer.task`` (or ``python -c code``) in its own process group, output to
    ``log``."""
    with open(log, "wb") as handle:
        return subprocess.Popen(
            [sys.executable, *(["-c", code] if code else ["-m", "trainer.task"]), *argv],
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


def run_tasks(
    tmp_path: Path, argv: list[str], name: str, replicas: int = 2, exit_code: int = 0, **options
) -> list[str]:
    """The trainer as the ``replicas`` tasks of one job on loopback, each with the variables
    Vertex sets (the runtime's writer, as the emulator uses it) but the output dirs (``argv``'s
    --job-dir), its own TMPDIR (``tmp-<name>-<task>``) and metrics file (``<name>-<task>.metrics``,
    the chief's task 0). ``options``: ``code`` for ``python -c``, further variables. Every task
    must exit ``exit_code``; returns their logs."""
    code = options.pop("code", "")
    hosts = [f"localhost:{port}" for port in free_ports(replicas)]
    pools = {"workerpool0": hosts[:1], "workerpool1": hosts[1:]}
    processes = []
    for task in range(replicas):
        pool, index = ("workerpool0", 0) if task == 0 else ("workerpool1", task - 1)
        vertex = vertex_env.replica_environment(
            pools, pool, index, base_output_dir=str(tmp_path), job_id="123", project_number="1"
        )
        scratch = tmp_path / f"tmp-{name}-{task}"
        scratch.mkdir()
        env = subprocess_env(TMPDIR=str(scratch), **options)
        env.update({key: value for key, value in vertex.items() if not key.startswith("AIP_")})
        env["CLOUD_ML_HP_METRIC_FILE"] = str(tmp_path / f"{name}-{task}.metrics")
        processes.append(start(argv, env, tmp_path / f"{name}-{task}.log", code))
    codes = wait_all(processes, timeout=240)
    logs = [(tmp_path / f"{name}-{task}.log").read_text() for task in range(replicas)]
    assert codes == [exit_code] * replicas, "\n-----\n".join(log[-3000:] for log in logs)
    return logs
