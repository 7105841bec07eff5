"""Run a project's ``trainer.task`` in its own tests, without the emulator: as a process (one
replica; a chief and a worker with Vertex's ``CLUSTER_SPEC``; the replicas of one job with all
Vertex sets on each, from the runtime's writer) or as a call in the test's process (no
start-up to pay, for what a run computes or refuses). Nothing restarts them.

Framework-free: every variant's tests use them; ``testing`` has the smaller helpers they build on.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from vertex_trainer_runtime import checkpoints, vertex_env

from vertex_trainer_tools.local_run.job import free_ports
from vertex_trainer_tools.project import project_root
from vertex_trainer_tools.testing import (
    cluster_spec,
    is_vertex_variable,
    kill,
    with_drill_hooks,
    without_vertex,
)


def start_trainer(
    args: list[str],
    env: dict[str, str],
    log: Path | None = None,
    project: Path | None = None,
    code: str = "",
) -> subprocess.Popen:
    """``python -m trainer.task ARGS`` (or ``python -c CODE ARGS``, a test's wrapper around it)
    from the project's folder with ``env`` and the drills' hooks on its path
    (``testing.with_drill_hooks``), in its own process group (so a kill takes
    all of it); its output goes to the file ``log`` (else pipes the caller reads)."""
    output = open(log, "w") if log else subprocess.PIPE
    try:
        return subprocess.Popen(
            [sys.executable, *(["-c", code] if code else ["-m", "trainer.task"]), *args],
            cwd=project or project_root(),
            env=with_drill_hooks(env),
            stdout=output,
            stderr=subprocess.STDOUT if log else subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    finally:
        if log:
            output.close()  # the child has its own copy


def run_trainer(
    args: list[str], env: dict[str, str], timeout: float, project: Path | None = None
) -> subprocess.CompletedProcess:
    """``start_trainer`` to the end; SIGKILLed (and the test failed) if it outlives ``timeout``."""
    process = start_trainer(args, env, project=project)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(process)
        raise AssertionError(f"the trainer ran past {timeout:g} s: {args}") from None
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def start_two_replicas(
    folder: Path, args: list[str], env: dict[str, str], project: Path | None = None
) -> dict[str, subprocess.Popen]:
    """A chief and a worker on loopback with Vertex-shaped ``CLUSTER_SPEC``s (``env`` plus those),
    logging to ``folder/<chief|worker>.log``; each writes its model, checkpoints and hypertune
    metrics under ``folder/<chief|worker>/``."""
    folder.mkdir(parents=True, exist_ok=True)
    chief, worker = free_ports(2)
    pools = {"workerpool0": [f"127.0.0.1:{chief}"], "workerpool1": [f"127.0.0.1:{worker}"]}
    processes = {}
    for name, pool in (("chief", "workerpool0"), ("worker", "workerpool1")):
        replica_env = {
            **env,
            "CLUSTER_SPEC": cluster_spec(pools, pool, 0),
            "CLOUD_ML_JOB_ID": "4711",
            "CLOUD_ML_HP_METRIC_FILE": str(folder / name / "metrics"),
        }
        outputs = [f"--model-dir={folder / name / 'model'}"]
        outputs.append(f"--checkpoint-dir={folder / name / 'checkpoints'}")
        log = folder / f"{name}.log"
        processes[name] = start_trainer([*args, *outputs], replica_env, log, project)
    return processes


def wait_all(
    processes: dict[str, subprocess.Popen] | list[subprocess.Popen], timeout: float
) -> list[int]:
    """Their exit codes once every process ended; past ``timeout`` kill them all and fail."""
    running = list(processes.values()) if isinstance(processes, dict) else list(processes)
    try:
        deadline = time.monotonic() + timeout
        while any(process.poll() is None for process in running):
            assert time.monotonic() < deadline, f"the trainer processes ran past {timeout:g} s"
            time.sleep(0.1)
    finally:
        for process in running:
            kill(process)
    return [process.returncode for process in running]


def kill_at_first_checkpoint(
    process: subprocess.Popen, checkpoint_dir: Path, timeout: float, log: Path
) -> int:
    """The step of the first complete checkpoint in ``checkpoint_dir``: then ``process`` is
    SIGKILLed, like a preempted VM (no clean-up runs). It must not end before (its ``log`` says
    why) nor take longer than ``timeout`` s (then it is SIGKILLed too, and the test failed)."""
    deadline = time.monotonic() + timeout
    try:
        while True:
            found = checkpoints.list_checkpoints(str(checkpoint_dir))
            complete = [c.step for c in found if checkpoints.problem(c) is None]
            if complete:
                return complete[0]
            ended = process.poll() is not None
            assert not ended, f"it ended too early:\n{Path(log).read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no complete checkpoint after {timeout:g} s"
            time.sleep(0.02)
    finally:
        kill(process)


def run_replicas(
    project: Path,
    folder: Path,
    argv: list[str],
    name: str,
    replicas: int = 2,
    exit_code: int | None = 0,
    env: dict[str, str] | None = None,
    code: str = "",
    timeout: float = 240,
) -> list[str]:
    """The trainer as the ``replicas`` training replicas of one job on loopback, started here
    (no emulator: nothing restarts them), each with what Vertex sets on it (the runtime's
    writer) but the output dirs (``argv`` says where), plus ``env``, its own TMPDIR
    (``folder/tmp-<name>-<replica>``) and hypertune file (``folder/<name>-<replica>.metrics``).
    Replica 0 is the chief. Every replica must exit ``exit_code`` (None: any code but 0);
    returns their logs."""
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
        processes.append(start_trainer(argv, variables, log, project, code))
    codes = wait_all(processes, timeout)
    logs = [(Path(folder) / f"{name}-{replica}.log").read_text() for replica in range(replicas)]
    failed = exit_code is None and 0 not in codes
    assert failed or codes == [exit_code] * replicas, "\n-----\n".join(log[-3000:] for log in logs)
    return logs


def without_vertex_variables(monkeypatch, **env: str) -> None:
    """This process's environment less the caller's Vertex variables, plus ``env``."""
    for name in list(os.environ):
        if is_vertex_variable(name):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def run_in_process(
    args: list[str], monkeypatch, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``trainer.task.main(args)`` called in this process, without the caller's Vertex
    variables, plus ``env``. ``stderr`` holds what the process would print there: its log lines
    (INFO and up) and its ERROR line; an exception fails the calling test."""
    from trainer import task  # the project's, importable from its tests

    without_vertex_variables(monkeypatch, **(env or {}))
    stderr = io.StringIO()
    handler = logging.StreamHandler(stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        with contextlib.redirect_stderr(stderr):
            code = task.main(args)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    return subprocess.CompletedProcess(["trainer.task", *args], code, "", stderr.getvalue())
