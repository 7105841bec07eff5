"""pytest fixtures that run the project's own trainer through the local Vertex emulator.

Installed with the package (entry point ``pytest11``), so a generated project's tests use them
without imports. Each fixture runs ``vertex-tools local-run`` from the project's folder, the
way ``make train-local`` does, and returns a ``LocalJob`` (exit code, each replica's lines per
attempt, its hypertune metrics, the job folder):

    def test_resumes(tmp_path, kill_and_resume):
        job = kill_and_resume(tmp_path / "job", ["--epochs=2"], replicas=2)
        assert "Resuming from" in "\\n".join(job.lines(attempt=2))

A user who changes the model keeps these drills on their own code; ``serve_model`` answers a
Vertex prediction request with an exported model as its container would. ``project_image``
builds the project's own image for the same fixtures' ``runner_args=["--image=..."]``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
from vertex_trainer_runtime import goodput

from vertex_trainer_tools import base_image, report
from vertex_trainer_tools.experiments_stand_in import ExperimentsServer, TrackedRun
from vertex_trainer_tools.project import CONFIG_FILE, project_root
from vertex_trainer_tools.testing import (
    CHIEF,
    HOOKS_DIR,
    SPOT_GRACE_SECONDS,
    LocalJob,
    make_train_local,
    run_local_job,
    with_reduction_server,
)

# Extra build arguments for a machine that needs them (space-separated NAME=VALUE, e.g.
# PIP_FIND_LINKS=... for a folder of wheels): the image of a real `make build` has none.
BUILD_ARGS_ENV = "TEST_DOCKER_BUILD_ARGS"


def readme_line(project: str | Path, command: str) -> list[str]:
    """The make variables of ``command``, a ``make train-local`` line of the project's README.md
    as written there (its comment aside); fails the test when the README has no such line."""
    text = (Path(project) / "README.md").read_text(encoding="utf-8")
    written = [
        shlex.join(shlex.split(line, comments=True))
        for line in text.splitlines()
        if line.startswith("make train-local")
    ]
    assert command in written, f"{command!r} is not a line of README.md: {written}"
    return shlex.split(command)[2:]


def run_readme_line(
    project: str | Path,
    command: str,
    output_dir: Path,
    trainer_args: list[str],
    timeout: float = 600,
    env: dict[str, str] | None = None,
    config: Path | None = None,
) -> LocalJob:
    """A ``make train-local`` line of the project's README, run as written but for the test's
    trainer flags (as ``ARGS``), job folder (``OUTPUT_DIR``) and, given ``config``, its copy of
    vertex.yaml (``CONFIG``), through ``run_local_job``: the test's checks then hold for the
    README's own command. A drill line (``KILL_AFTER``) must fire and its job succeed
    (``assert_drill``); the caller checks any other job's exit."""
    variables = [*readme_line(project, command), f"ARGS={shlex.join(trainer_args)}"]
    variables += [f"CONFIG={config}"] if config else []
    runner_args, trainer = make_train_local(project, output_dir, *variables)
    job = run_local_job(output_dir, runner_args, trainer, timeout, env, project=Path(project))
    drill = dict(a[2:].split("=", 1) for a in runner_args if a.startswith("--kill-"))
    if drill:
        assert_drill(job, drill["kill-replica"], drill["kill-signal"])
    return job


def assert_drill(job: LocalJob, replica: str = CHIEF, signal: str = "KILL") -> None:
    """The kill drill's signal reached ``replica``, which then ran a second time, and the job
    succeeded; after a SIGTERM, a complete checkpoint came and the replica exited by itself."""
    assert job.returncode == 0, job.tail()
    assert f"kill drill: SIG{signal} to {replica}" in job.output, job.tail()
    assert job.attempts(replica) == 2, job.tail()
    if signal == "TERM":
        assert re.search(r"kill drill: .+ complete [\d.]+s after SIGTERM", job.output), job.tail()
        assert re.search(rf"kill drill: {replica} exited \d+ [\d.]+s after", job.output), job.tail()
    assert_drill_report(job, replica, signal)


def assert_drill_report(job: LocalJob, replica: str = CHIEF, signal: str = "KILL") -> None:
    """The job ledger tells the drill as it happened: two attempts of ``replica``; after a
    SIGTERM no step is lost; after a SIGKILL the rerun resumed from the newest checkpoint the
    drill saw or a newer one, and the lost steps are those the first attempt did past it."""
    ledger = report.read_ledger(str(job.output_dir))
    goodput.account(ledger)
    attempts = [attempt for attempt in ledger.attempts if attempt.replica == replica]
    assert len(attempts) == 2, [(a.replica, a.ended) for a in ledger.attempts]
    first, second = attempts  # a rerun with every step done only evaluates: no step record
    if signal == "TERM":
        assert first.lost_steps == 0 and first.seconds["lost"] == 0, first.seconds
    elif second.restored is not None:
        seen = re.search(rf"kill drill: SIGKILL to {replica} after checkpoint-(\d+)", job.output)
        assert seen is None or second.restored >= int(seen.group(1)), job.tail()
        assert first.reached >= second.restored, "the killed attempt saved that checkpoint"
    for attempt in attempts:
        assert sum(attempt.seconds.values()) == pytest.approx(attempt.end - attempt.start)


def kill_drill(
    output_dir: Path,
    trainer_args: list[str],
    *,
    replicas: int = 2,
    after: str = "checkpoint",
    replica: str = CHIEF,
    restart_job: bool | None = None,
    signal: str = "KILL",
    grace: float = SPOT_GRACE_SECONDS,
    runner_args: list[str] = (),
    timeout: float = 600,
    env: dict[str, str] | None = None,
    project: Path | None = None,
) -> LocalJob:
    """The preemption drill of the ``kill_and_resume`` fixture (which documents it), as a function:
    a session-scoped fixture runs it once for the several tests that read one drill."""
    drill = [f"--replicas={replicas}", f"--kill-after={after}", f"--kill-replica={replica}"]
    drill += list(runner_args)
    if signal != "KILL":
        drill += [f"--kill-signal={signal}", f"--kill-grace={grace:g}"]
    if restart_job is not None:
        drill.append(f"--{'' if restart_job else 'no-'}restart-job-on-worker-restart")
    job = run_local_job(output_dir, drill, list(trainer_args), timeout, env, project=project)
    assert_drill(job, replica, signal)
    return job


@pytest.fixture
def experiment_run(monkeypatch):
    """A job's Vertex AI Experiment run at a local REST stand-in: run the trainer with
    ``experiment_run.env``, then read ``experiment_run.logged()`` / ``.evaluations()``. A
    trainer run in this process is sent there as the replica hooks send a replica's."""
    from vertex_trainer_runtime import tracking

    from vertex_trainer_tools.replica_hooks import drill_hooks

    start = drill_hooks.stand_in_endpoint(tracking.Tracker._start)
    monkeypatch.setattr(tracking.Tracker, "_start", start)
    with ExperimentsServer(experiments=("tests",)) as server:
        yield TrackedRun(server)


# sitecustomize code (the ``sitecustomize`` fixture) that holds a pool's replicas at their start,
# before anything else runs in them (under torchrun: their launcher, not its workers).
HOLD_AT_START = """
import json, os, time
task = (json.loads(os.environ.get("CLUSTER_SPEC") or "null") or dict()).get("task") or dict()
if task.get("type") == POOL and "LOCAL_RANK" not in os.environ:
    time.sleep(SECONDS)
"""


def hold_at_start(seconds: float, pool: str = "workerpool1") -> str:
    """``sitecustomize`` code that holds ``pool``'s replicas ``seconds`` at their start: the
    others' wait for them shows in the job ledger as waiting for peers."""
    return HOLD_AT_START.replace("POOL", repr(pool)).replace("SECONDS", repr(float(seconds)))


def job_ledger(job: LocalJob) -> goodput.Ledger:
    """The job's ledger, accounted: ``make report``'s figures per attempt of each replica."""
    found = report.read_ledger(str(job.output_dir))
    goodput.account(found)
    return found


def first_attempts(found: goodput.Ledger, *replicas: str) -> list[goodput.Attempt]:
    """The first attempt of each of ``replicas`` in an accounted ledger (``job_ledger``)."""
    return [next(a for a in found.attempts if a.replica == name) for name in replicas]


@pytest.fixture(scope="session")
def vertex_project(pytestconfig) -> Path:
    """The project under test: the folder with vertex.yaml at or above pytest's rootdir."""
    return project_root(pytestconfig.rootpath)


@pytest.fixture
def local_job(vertex_project):
    """``local_job(output_dir, trainer_args, replicas=1, runner_args=(), ...)``: one job run.

    ``output_dir`` is the job folder (``--output-dir``); ``runner_args`` are further
    ``vertex-tools local-run`` flags (``--image``, ``--print-env`` ...).
    """

    def run(
        output_dir: Path,
        trainer_args: Sequence[str] = (),
        *,
        replicas: int = 1,
        runner_args: Sequence[str] = (),
        timeout: float = 600,
        env: dict[str, str] | None = None,
    ) -> LocalJob:
        flags = [f"--replicas={replicas}", *runner_args]
        return run_local_job(
            output_dir, flags, list(trainer_args), timeout, env, project=vertex_project
        )

    return run


# The first lines of a ``sitecustomize`` fixture's file, which hides the drills' own.
DRILL_HOOKS = "import drill_hooks\n\ndrill_hooks.install()\n"


@pytest.fixture
def sitecustomize(tmp_path, vertex_project):
    """``sitecustomize(code, **variables)``: the environment variables (``env=`` of the fixtures
    here) that load ``code`` into every Python process of the trainer as ``sitecustomize``:
    test-only hooks, which act on the ``variables`` they read. The drills' hooks load first."""

    def env(code: str, **variables: str) -> dict[str, str]:
        folder = tmp_path / "sitecustomize"
        folder.mkdir(exist_ok=True)
        (folder / "sitecustomize.py").write_text(f"{DRILL_HOOKS}\n{code}")
        path = [str(folder), str(vertex_project), os.environ.get("PYTHONPATH", ""), str(HOOKS_DIR)]
        return {"PYTHONPATH": os.pathsep.join(filter(None, path)), **variables}

    return env


@pytest.fixture
def kill_and_resume(vertex_project):
    """``kill_and_resume(output_dir, trainer_args, replicas=2, after="checkpoint", ...)``.

    The preemption drill: the emulator stops ``replica`` once ``after`` is reached (a
    checkpoint saved, ``checkpoint:N``, or seconds), reruns it (every replica with
    ``restart_job``, as Vertex's ``restart_job_on_worker_restart``) and the job must succeed.
    ``signal="KILL"`` (default) is a crash: SIGKILL. ``signal="TERM"`` is Compute Engine's
    preemption notice: SIGTERM, then SIGKILL after ``grace`` seconds; the replica must save a
    new complete checkpoint and exit by itself within them. Fails the test with the job's
    output when the drill did not fire or the job failed.
    """

    def run(output_dir: Path, trainer_args: Sequence[str] = (), **options) -> LocalJob:
        return kill_drill(output_dir, list(trainer_args), project=vertex_project, **options)

    return run


@pytest.fixture
def reduction_server_config(vertex_project, tmp_path) -> Path:
    """A copy of vertex.yaml with ``job.reduction_server`` (2 reducers) and a GPU worker pool,
    for ``runner_args=[f"--config={path}"]``: every replica then sees the CLUSTER_SPEC and
    TF_CONFIG of such a job, and the reducers idle (their image cannot run here)."""
    return with_reduction_server(vertex_project / CONFIG_FILE, tmp_path / "vertex.yaml")


@pytest.fixture
def hpt_trial(local_job):
    """``hpt_trial(output_dir, trainer_args, trial=1)``: the job as trial N of vertex.yaml's study.

    The emulator appends the trial's ``--<parameter>=<value>`` arguments, as Vertex does, and
    gives the job folder its ``<trial>/`` level; ``job.metrics()`` reads what the chief reported.
    """

    def run(
        output_dir: Path, trainer_args: Sequence[str] = (), *, trial: int = 1, **options
    ) -> LocalJob:
        runner_args = [f"--hpt-trial={trial}", *options.pop("runner_args", ())]
        job = local_job(output_dir, trainer_args, runner_args=runner_args, **options)
        job.trial = str(trial)
        return job

    return run


@pytest.fixture
def local_study(vertex_project, tmp_path):
    """``local_study(trainer_args, trials=, parallel=, **hpt)``: ``make tune-local`` on the
    project's trainer, with vertex.yaml's ``hpt`` keys given replaced (``algorithm="grid"``,
    ``parameters={...}``, ``max_failed_trial_count=1`` ...), in a study folder under
    ``tmp_path``. Returns the finished process with ``.journal`` (``tune_local.journal``: each
    trial's values, reports, state and final metric) and ``.folder``.
    """
    import sys

    import yaml

    from vertex_trainer_tools.tune_local import journal as journal_lib

    def run(trainer_args: Sequence[str] = (), *, trials=None, parallel=None, **hpt):
        config = vertex_project / CONFIG_FILE
        if hpt:
            data = yaml.safe_load(config.read_text(encoding="utf-8"))
            data["hpt"].update(hpt)
            config = tmp_path / "study.yaml"
            config.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        root = tmp_path / "studies"
        command = [sys.executable, "-m", "vertex_trainer_tools", "tune-local"]
        command += [f"--config={config}", f"--studies-root={root}"]
        command += [f"--trials={trials}"] if trials else []
        command += [f"--parallel={parallel}"] if parallel else []
        done = subprocess.run(
            [*command, "--", *trainer_args],
            cwd=vertex_project,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        done.folder = (root / "latest").resolve()
        done.journal = journal_lib.read(done.folder) if done.folder.is_dir() else None
        return done

    return run


@pytest.fixture
def serve_model():
    """``serve_model(model_dir, instances, **fields)``: the response, ``{"predictions": [...]}``, of
    the export in ``model_dir`` to the Vertex request ``{"instances": instances, **fields}``.

    Served the way its prebuilt container serves it, by the code of ``make predict-local``
    (``vertex_trainer_tools.serving``): compare it with what the trainer's own code predicts.
    """
    from vertex_trainer_tools import serving

    def run(model_dir: str | Path, instances: Sequence, **fields) -> dict:
        return serving.predict(model_dir, {"instances": list(instances), **fields})

    return run


def _docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def locked_context(project: Path, base: str, scratch: Path) -> Path:
    """The project's build context with a lock for ``base``'s Python: the project's own lock
    when it fits, else a copy with one made for it (the project's lock, for the real base's
    Python, is never touched). A PyTorch lock takes torch from the base at this env's version."""
    from vertex_trainer_tools import lock as lock_lib

    version = "import sys; print('%d.%d' % sys.version_info[:2])"
    python = _docker("run", "--rm", base, "python", "-c", version).stdout.strip()
    if not lock_lib.lock_problem(project) and lock_lib.header(project).get("python") == python:
        return project
    context = scratch / project.name
    ignore = shutil.ignore_patterns(".git", ".venv", "outputs", "build", "dist", "*.egg-info")
    shutil.copytree(project, context, ignore=ignore)
    requirements = (project / "requirements.txt").read_text()
    from_base = []
    if re.search(r"^torch\b", requirements, re.M):
        from importlib.metadata import version as installed

        from_base = [f"torch=={installed('torch').split('+')[0]}"]
    lock_lib.lock(context, python, lock_lib.PLATFORM, from_base, [])
    return context


@pytest.fixture(scope="session")
def project_image(vertex_project, tmp_path_factory) -> str:
    """The image of the project's Dockerfile, built as ``make build BASE_IMAGE=<base>`` does (the
    runtime's wheel in ``wheels/`` when it is unreleased), on ``TEST_BASE_IMAGE`` or the stand-in
    base of ``make base-image``; removed afterwards.

    Skips, saying why, without a Docker engine or a base image (nothing can be pulled offline).
    """
    if shutil.which("docker") is None:
        pytest.skip("no docker executable on PATH")
    version = _docker("version", timeout=60)
    if version.returncode != 0:
        lines = version.stderr.strip().splitlines() or ["no answer"]
        pytest.skip(f"no Docker engine answers: {lines[-1]}")
    base = os.environ.get("TEST_BASE_IMAGE") or base_image.default_tag_here()
    if _docker("image", "inspect", base).returncode != 0:
        pytest.skip(f"no base image {base}: run `make base-image` or set TEST_BASE_IMAGE")
    tag = f"local/{vertex_project.name.replace('_', '-')}-test:{uuid.uuid4().hex[:8]}"
    from vertex_trainer_tools import runtime_package

    context = locked_context(vertex_project, base, tmp_path_factory.mktemp("image"))
    runtime_package.image_wheel(context)  # an unreleased runtime's wheel, as make build
    extra = [f"--build-arg={arg}" for arg in os.environ.get(BUILD_ARGS_ENV, "").split()]
    command = ["build", "--force-rm", f"--build-arg=BASE_IMAGE={base}", *extra, "--tag", tag]
    built = _docker(*command, str(context), timeout=3600)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    try:
        yield tag
    finally:
        _docker("image", "rm", tag, timeout=300)
