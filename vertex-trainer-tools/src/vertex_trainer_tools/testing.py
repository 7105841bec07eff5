"""Run a project's job through the local emulator the way a user does, for drill tests.

``run_local_job`` starts ``vertex-tools local-run`` in its own process from the project's
folder, collects each replica's log lines per attempt and its hypertune metrics, and proves
that nothing is left behind. The pytest plugin (``pytest_plugin``) wraps it in fixtures;
the small helpers below (``read_metrics``, ``cluster_spec``, ``kill`` ...) serve a project's
own tests of its trainer, which run it as a process with Vertex's environment.
"""

from __future__ import annotations

import glob
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vertex_trainer_tools.local_run import launcher
from vertex_trainer_tools.project import project_root
from vertex_trainer_tools.replica_hooks import drill_hooks

CHIEF = "workerpool0-0"
SPOT_GRACE_SECONDS = 30  # Compute Engine's: SIGKILL this long after the preemption's SIGTERM
# What Vertex sets on a replica; a test's trainer must not inherit them from the caller's shell.
VERTEX_PREFIXES = ("AIP_", "CLOUD_ML_", "CLUSTER_SPEC", "TF_CONFIG")
# The drills' test hooks (``replica_hooks/drill_hooks.py``): in every job ``run_local_job`` runs
# (through local-run's ``LOCAL_RUN_HOOKS``) and every trainer ``trainer_runs`` starts; each acts
# only on its variable, such as this one: every training step lasts at least this many seconds.
HOOKS_DIR = Path(__file__).with_name("replica_hooks")
DRILL_STEP_SECONDS_ENV = drill_hooks.STEP_SECONDS_ENV


def is_vertex_variable(name: str) -> bool:
    return name.startswith(VERTEX_PREFIXES)


def without_vertex(**extra: str) -> dict[str, str]:
    """This process's environment less the caller's Vertex variables, plus ``extra``."""
    env = {name: value for name, value in os.environ.items() if not is_vertex_variable(name)}
    env.update(extra)
    return env


def with_drill_hooks(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the drills' hooks last on its PYTHONPATH, for a trainer a test starts."""
    return {**env, "PYTHONPATH": launcher.with_hooks(env, str(HOOKS_DIR))}


def read_metrics(path: str | Path) -> list[dict]:
    """The measurements cloudml-hypertune wrote, oldest first ([] when there is no file)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def kill(process: subprocess.Popen) -> None:
    """SIGKILL the process's whole group (started with ``start_new_session=True``), like a
    preempted VM: torchrun workers and TensorFlow tasks waiting for a peer go too."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def nvidia_gpu_count() -> int:
    """NVIDIA GPUs on this machine, per ``nvidia-smi -L`` or else the driver's /proc entries
    (for the GPU tests' skip reasons)."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
            return sum(line.startswith("GPU ") for line in listed.stdout.splitlines())
        except (OSError, subprocess.TimeoutExpired):
            pass
    folder = "/proc/driver/nvidia/gpus"
    return len(os.listdir(folder)) if os.path.isdir(folder) else 0


def cluster_spec(
    pools: dict[str, list[str]], pool: str, index: int = 0, trial: str | None = "", **extra
) -> str:
    """``CLUSTER_SPEC`` as Vertex sets it: ``job`` is a JSON string, ``trial`` may be empty
    (``None``: no ``trial`` key); ``extra`` adds top-level keys a trainer must ignore."""
    task = {"type": pool, "index": index}
    if trial is not None:
        task["trial"] = trial
    spec = {
        "cluster": pools,
        "environment": "cloud",
        "task": task,
        "job": json.dumps({"python_module": "", "package_uris": [], "job_args": []}),
        **extra,
    }
    return json.dumps(spec)


def with_reduction_server(config: Path, copy: Path, reducers: int = 2) -> Path:
    """Write ``copy``: the vertex.yaml ``config`` with a Reduction Server of ``reducers``
    replicas (pool 2) and one GPU worker in pool 1, which it needs. Returns ``copy``."""
    import yaml  # the config reader's own dependency

    data = yaml.safe_load(Path(config).read_text())
    job = data["job"]
    chief = job["worker_pools"][0]
    workers = {**chief, "accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 1}
    job["worker_pools"] = [chief, {**workers, "replica_count": 1}]
    job["reduction_server"] = {"replica_count": reducers, "machine_type": "n1-highcpu-16"}
    Path(copy).write_text(yaml.safe_dump(data, sort_keys=False))
    return Path(copy)


def job_processes(job_id: str) -> list[int]:
    """Live processes (not zombies) whose environment carries this job's CLOUD_ML_JOB_ID."""
    return [process.pid for process in launcher.job_processes(job_id)]


def runner_temp_dirs(job_id: str) -> list[str]:
    """The runner's per-job temporary folders (each replica's TMPDIR lives in one)."""
    return glob.glob(os.path.join(tempfile.gettempdir(), f"local_run-{job_id}-*"))


@dataclass
class LocalJob:
    """What one run of the local runner printed and left in its output directory."""

    returncode: int
    output: str
    output_dir: Path
    job_id: str
    seconds: float
    trial: str | None = None  # the HPT trial the job ran as, if any

    def lines(self, replica: str = CHIEF, attempt: int | None = None) -> list[str]:
        """The replica's own log lines (prefix removed), of one attempt or of all."""
        lines, current = [], 1
        for line in self.output.splitlines():
            started = re.match(rf"local_run \| starting {replica}(?: \(attempt (\d+)\))?$", line)
            if started:
                current = int(started.group(1) or 1)
            elif line.startswith(f"{replica} | ") and attempt in (None, current):
                lines.append(line[len(replica) + 3 :])
        return lines

    def attempts(self, replica: str = CHIEF) -> int:
        return len(re.findall(rf"^local_run \| starting {replica}\b", self.output, re.M))

    def metrics_file(self, replica: str = CHIEF, trial: str | None = None) -> Path:
        trial = trial or self.trial
        run_dir = self.output_dir / trial if trial else self.output_dir
        return run_dir / "hypertune" / replica / "output.metrics"

    def metrics(self, replica: str = CHIEF) -> list[dict]:
        """The JSON lines cloudml-hypertune wrote for the replica's last attempt."""
        return read_metrics(self.metrics_file(replica))

    def reported_steps(self, replica: str = CHIEF) -> list[int]:
        return [int(line["global_step"]) for line in self.metrics(replica)]

    def tail(self, characters: int = 6000) -> str:
        return self.output[-characters:]

    def exited_after_drill(self, replica: str) -> float:
        """Seconds from the kill drill's signal (to another replica) until ``replica`` exited."""
        found = re.search(
            rf"kill drill: {replica} exited -?\d+ ([\d.]+)s after the SIG", self.output
        )
        assert found, f"no drill line for {replica}'s exit\n{self.tail()}"
        return float(found.group(1))

    def sigterm_to_exit(
        self, replica: str = CHIEF, grace: float = SPOT_GRACE_SECONDS
    ) -> tuple[int, float]:
        """(exit code, seconds) of ``replica`` after the kill drill's SIGTERM, printed for the
        record; fails the test unless the replica exited within ``grace`` seconds."""
        found = re.search(
            rf"kill drill: {replica} exited (-?\d+) ([\d.]+)s after SIGTERM", self.output
        )
        assert found, f"no SIGTERM drill line for {replica}\n{self.tail()}"
        code, seconds = int(found.group(1)), float(found.group(2))
        print(f"SIGTERM to exit of {replica}: {seconds:.1f} s (exit {code}, grace {grace:g} s)")
        assert seconds < grace, self.tail()
        return code, seconds


def make_train_local(
    project: str | Path, output_dir: str | Path, *variables: str
) -> tuple[list[str], list[str]]:
    """(runner flags, trainer flags) of ``make train-local VARIABLES`` as make expands them, to
    run through ``run_local_job`` exactly as the user's command would."""
    printed = subprocess.run(
        ["make", "-n", "--no-print-directory", "train-local", f"PYTHON={sys.executable}"]
        + [f"OUTPUT_DIR={output_dir}", *variables],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    words = shlex.split(printed.replace("\\\n", " "))
    split = words.index("--")
    return words[words.index("local-run") + 1 : split], words[split + 1 :]


def run_local_job(
    output_dir: Path,
    runner_args: list[str],
    trainer_args: list[str],
    timeout: float = 300,
    env: dict[str, str] | None = None,
    project: Path | None = None,
) -> LocalJob:
    """``vertex-tools local-run RUNNER_ARGS -- TRAINER_ARGS`` from the project root.

    The drills' hooks load into every replica (``HOOKS_DIR``), in containers too.
    On timeout the runner gets SIGTERM (it stops its replicas), then SIGKILL; the caller's
    test then fails on the non-zero return code. Afterwards no process of the job and no
    temporary folder of the runner may remain.
    """
    job_id = str(random.SystemRandom().randrange(10**18, 10**19))
    command = [
        sys.executable,
        "-m",
        "vertex_trainer_tools",
        "local-run",
        f"--output-dir={output_dir}",
        f"--job-id={job_id}",
        "--grace=5",
        *runner_args,
        "--",
        *trainer_args,
    ]
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=project or project_root(),
        env={launcher.HOOKS_ENV: str(HOOKS_DIR), **os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        output += f"\n[test] the runner was stopped after {timeout:.0f} s\n"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    seconds = time.monotonic() - started
    deadline = time.monotonic() + 60  # killed processes vanish at once unless the load is high
    while job_processes(job_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    leftovers = job_processes(job_id)
    for pid in leftovers:  # never leave them running, but fail the test below
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not leftovers, f"processes of job {job_id} left behind: {leftovers}\n{output[-3000:]}"
    assert not runner_temp_dirs(job_id), "the runner left its temporary folder behind"
    return LocalJob(process.returncode, output, Path(output_dir), job_id, seconds)
