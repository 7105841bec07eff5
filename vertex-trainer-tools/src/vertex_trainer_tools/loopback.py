"""A project's trainer as the replicas of one job on loopback, started without the emulator.

For a project's tests that start the trainer themselves (``vertex-tools local-run`` through the
pytest plugin's fixtures is the other way): each replica gets what Vertex sets on it, from the
runtime's writer (``vertex_trainer_runtime.vertex_env``), and nothing restarts it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from vertex_trainer_runtime import vertex_env

from vertex_trainer_tools.testing import free_ports, kill, without_vertex


def start_trainer(
    project: Path, argv: list[str], env: dict[str, str], log: Path, code: str = ""
) -> subprocess.Popen:
    """``python -m trainer.task ARGV`` (or ``python -c CODE ARGV``) from ``project``, in its own
    process group (``kill`` ends it whole), output to ``log``."""
    command = [sys.executable, *(["-c", code] if code else ["-m", "trainer.task"]), *argv]
    with open(log, "wb") as handle:
        return subprocess.Popen(
            command,
            cwd=project,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_all(processes: list[subprocess.Popen], timeout: float) -> list[int]:
    """Exit codes; every process still running at ``timeout`` is killed (AssertionError)."""
    deadline = time.monotonic() + timeout
    try:
        for process in processes:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        for process in processes:
            kill(process)
        message = f"trainer processes still running after {timeout:.0f} s; killed"
        raise AssertionError(message) from None
    return [process.returncode for process in processes]


def run_replicas(
    project: Path,
    folder: Path,
    argv: list[str],
    name: str,
    replicas: int = 2,
    exit_code: int = 0,
    env: dict[str, str] | None = None,
    code: str = "",
    timeout: float = 240,
) -> list[str]:
    """The trainer as the ``replicas`` training replicas of one job on loopback, started here
    (no emulator: nothing restarts them), each with what Vertex sets on it (the runtime's
    writer) but the output dirs (``argv`` says where), plus ``env``, its own TMPDIR
    (``folder/tmp-<name>-<replica>``) and hypertune file (``folder/<name>-<replica>.metrics``).
    Replica 0 is the chief. Every replica must exit ``exit_code``; returns their logs."""
    hosts = [f"localhost:{port}" for port in free_ports(replicas)]
    pools = {"workerpool0": hosts[:1], "workerpool1": hosts[1:]}
    processes = []
    for replica in range(replicas):
        pool, index = ("workerpool0", 0) if replica == 0 else ("workerpool1", replica - 1)
        vertex = vertex_env.replica_environment(
            pools, pool, index, base_output_dir=str(folder), job_id="123", project_number="1"
        )
        scratch = Path(folder) / f"tmp-{name}-{replica}"
        scratch.mkdir()
        variables = without_vertex(**(env or {}), TMPDIR=str(scratch))
        variables.update({k: v for k, v in vertex.items() if not k.startswith("AIP_")})
        variables["CLOUD_ML_HP_METRIC_FILE"] = str(Path(folder) / f"{name}-{replica}.metrics")
        log = Path(folder) / f"{name}-{replica}.log"
        processes.append(start_trainer(project, argv, variables, log, code))
    codes = wait_all(processes, timeout)
    logs = [(Path(folder) / f"{name}-{replica}.log").read_text() for replica in range(replicas)]
    assert codes == [exit_code] * replicas, "\n-----\n".join(log[-3000:] for log in logs)
    return logs
