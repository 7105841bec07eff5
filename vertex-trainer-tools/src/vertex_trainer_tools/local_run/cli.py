"""``vertex-tools local-run`` (``make train-local`` wraps it): the job of vertex.yaml run here.

Its options are in ``options.py``; ``cli.py`` of the package declares them on its parser."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from vertex_trainer_tools import contract
from vertex_trainer_tools.errors import ToolError
from vertex_trainer_tools.local_run import folders, images, preflight, record
from vertex_trainer_tools.local_run.job import (
    Job,
    environments,
    make_job,
    pool_sizes,
    replica_env,
    replica_name,
    trial_values,
)
from vertex_trainer_tools.local_run.launcher import ProcessLauncher, cpu_slices
from vertex_trainer_tools.local_run.supervisor import DRILL_NOT_FIRED, Replica, Supervisor
from vertex_trainer_tools.project import project_root


def _overrides(pairs: Sequence[str]) -> dict[str, str]:
    overrides = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--hp expects NAME=VALUE, got {pair!r}")
        overrides[name.strip()] = value
    return overrides


def build(args: argparse.Namespace):
    """The job that the parsed command line describes, the config it came from, and the
    record of the job it resumes (None for a new job, or a folder without a record).

    Without --output-dir or --resume, the job's folder is only planned here: ``main`` creates
    it (``folders.new_job_folder``) once everything is checked. With --resume the job's
    replica counts, flags, trial and id are the record's (``record.py``).
    """
    from vertex_trainer_tools import config as config_module  # the same reader submit.py uses

    config = config_module.load(args.config)
    pools = config.job.all_pools  # job.reduction_server is pool 2
    # Another image's pools (a Reduction Server) cannot run here: their replicas idle, so that
    # CLUSTER_SPEC and TF_CONFIG show every replica, as on Vertex.
    idle = [number for number, pool in enumerate(pools) if pool.image_uri and not pool.empty]
    for number in idle:
        print(f"local_run | workerpool{number} runs {pools[number].image_uri}: idle replicas here")
    sizes = pool_sizes([pool.replica_count for pool in pools], args.replicas, keep=idle)
    trial_args: list[str] = []
    if args.hpt_trial is not None:
        if args.hpt_trial < 1:
            raise ValueError("--hpt-trial counts from 1, like Vertex's trial ids")
        if config.hpt is None:
            raise ValueError(f"{args.config} has no hpt study for --hpt-trial")
        values = trial_values(config.hpt.parameters, args.hpt_trial, _overrides(args.hp))
        trial_args = [f"--{name}={value}" for name, value in values.items()]
    elif args.hp:
        raise ValueError("--hp needs --hpt-trial")
    resumed = None
    if args.output_dir:
        output_dir = args.output_dir
    elif args.resume:
        output_dir = str(folders.resume_folder(args.resume, args.jobs_root))
        resumed = record.read(output_dir)
    else:
        output_dir = str(Path(args.jobs_root) / folders.job_folder_name(config.job.display_name))
    idle_pools = [f"workerpool{number}" for number in idle]
    if resumed is not None:
        record.check_resume(
            resumed, output_dir, args.replicas, args.hpt_trial, args.hp, args.trainer_args
        )
        job = make_job(
            resumed.replica_counts,
            output_dir,
            args=resumed.args,
            trial=resumed.trial,
            job_id=args.job_id or resumed.job_id,
            job_args=resumed.job_args,
            idle_pools=idle_pools,
        )
    else:
        refuse_trainer_args(config, args)
        job = make_job(
            sizes,
            output_dir,
            args=list(config.job.args) + list(args.trainer_args) + trial_args,
            trial=args.hpt_trial,
            job_id=args.job_id,
            job_args=config.job.args,
            idle_pools=idle_pools,
        )
    if not math.isfinite(args.kill_grace) or args.kill_grace < 0:
        raise ValueError(f"--kill-grace must be >= 0 seconds, got {args.kill_grace:g}")
    if args.kill_after is not None and args.kill_replica not in job.names:
        raise ValueError(
            f"--kill-replica: {args.kill_replica} is not a replica of this job "
            f"(e.g. {' or '.join(job.names)}); the kill drill cannot fire"
        )
    return job, config, resumed


def refuse_trainer_args(config, args: argparse.Namespace) -> None:
    """The project trainer's flags that it would refuse or ignore (``ARGS=--epochs=abc``, a
    flag it lacks): one line each, before any replica starts, as ``check`` reports them."""
    if args.module != "trainer.task":
        return  # another module's flags are not the trainer's
    from vertex_trainer_tools import preflight as config_checks

    lines = config_checks.argument_lines(config, config.job.args, args.trainer_args, None)
    if lines:
        raise ToolError(*lines)


def print_env(job: Job, command: list[str], envs: dict[str, dict[str, str]] | None = None) -> None:
    print("command: " + " ".join(command))
    for pool, index in job.replicas:
        name = replica_name(pool, index)
        print(
            f"{name}:" + (" (another image on Vertex: idle here)" if pool in job.idle_pools else "")
        )
        env = envs[name] if envs is not None else replica_env(job, pool, index)
        for key, value in env.items():
            print(f"  {key}={value}")


def command(args: argparse.Namespace) -> int:
    """``vertex-tools local-run``: plan the job, check it, make its folder, run it. The job's
    modules refuse bad input with ValueError or OSError: each is one line here, exit 2."""
    try:
        job, config, resumed = build(args)
    except ModuleNotFoundError as error:  # config needs PyYAML
        raise ToolError(f"{sys.executable} cannot import {error.name}: {preflight.FIX}") from None
    except (OSError, ValueError) as error:
        raise ToolError(str(error)) from None
    image = None
    if args.image is not None:
        image = args.image or images.default_image(config)
    elif args.gpus:
        raise ToolError(
            "--gpus (GPUS=) is for container runs (--image, IMAGE=1); "
            "a replica run as a process sees this machine's GPUs already"
        )
    if args.print_env:
        if image is None:
            print_env(job, ProcessLauncher(args.module, project_root()).command(job.args))
        else:
            envs = images.container_environments(job, config.base_output_dir, config.job.env)
            print_env(job, ["docker", "run", image, *job.args], envs)
        return 0
    if resumed is not None and resumed.state == record.SUCCEEDED:
        return finished(job, args)
    if image is not None:
        problem = images.check_image(image)
    else:
        problem = preflight.check(project_root()) if args.module == "trainer.task" else ""
    if problem:
        raise ToolError(problem.removeprefix("ERROR: "))
    try:
        job = make_job_folder(job, args, config.job.display_name)
    except OSError as error:
        where = error.filename or job.output_dir
        raise ToolError(
            f"{where}: cannot make the job folder there ({error.strerror or error}); "
            "use a writable --jobs-root or --output-dir"
        ) from None
    started = resumed or record.JobRecord(
        job_id=job.job_id,
        replica_counts=replica_counts(job),
        trainer_args=tuple(args.trainer_args),
        args=job.args,
        job_args=job.job_args,
        trial=job.trial,
        hp=tuple(args.hp),
    )
    try:
        record.write(job.output_dir, record.with_state(started, record.RUNNING))
    except OSError as error:
        raise ToolError(
            f"{record.path(job.output_dir)}: cannot write the job record "
            f"({error.strerror or error}); use a writable --jobs-root or --output-dir"
        ) from None
    if image is not None:
        launcher = images.ContainerLauncher(image, job, config.base_output_dir, args.gpus)
    else:
        launcher = ProcessLauncher(
            args.module, project_root(), tmp_prefix=f"local_run-{job.job_id}-", job_id=job.job_id
        )
    try:
        status = run(job, config, args, launcher)
    except ToolError:  # Docker refused a container or the network: the job did not run
        record.write(job.output_dir, record.with_state(started, record.FAILED))
        raise
    finally:
        launcher.close()
    # A drill that never fired is the drill's failure; the job itself succeeded.
    ended = record.SUCCEEDED if status in (0, DRILL_NOT_FIRED) else record.FAILED
    record.write(job.output_dir, record.with_state(started, ended))
    return status


def make_job_folder(job: Job, args: argparse.Namespace, display_name: str) -> Job:
    """Create the job's folder (a new one, or the resumed or given one) and point ``latest``
    at it; OSError when the place is not a writable folder."""
    if not args.output_dir:
        root = Path(args.jobs_root)
        if not args.resume:
            folder = folders.new_job_folder(root, display_name)
            job = dataclasses.replace(job, output_dir=str(folder))
        folders.point_latest(root, job.output_dir)
    os.makedirs(job.output_dir, exist_ok=True)
    if not os.access(job.output_dir, os.W_OK | os.X_OK):
        raise PermissionError(13, "Permission denied", job.output_dir)
    return job


def replica_counts(job: Job) -> tuple[int, ...]:
    """The replica count of each worker pool up to the job's last: ``pool_sizes``' form."""
    counts = [len(job.pools.get(pool, ())) for pool in contract.POOLS]
    while len(counts) > 1 and counts[-1] == 0:
        counts.pop()
    return tuple(counts)


def finished(job: Job, args: argparse.Namespace) -> int:
    """A resumed job that SUCCEEDED: nothing to train or export again (that would replace its
    model); one line, the model and the folder, exit 0. A drill asked of it cannot fire."""
    chief_env = replica_env(job, *job.replicas[0])
    print(
        f"local_run | job {job.job_id} SUCCEEDED already: nothing to train or export again "
        "(a new job: make train-local without RESUME)",
        flush=True,
    )
    print(f"local_run | model: {chief_env['AIP_MODEL_DIR']}")
    print(f"local_run | job folder: {job.output_dir}/", flush=True)
    if args.kill_after is not None:
        print(
            f"ERROR: kill drill did not fire: job {job.job_id} SUCCEEDED already, nothing "
            "runs (drill a new job: make train-local KILL_AFTER=... without RESUME)",
            flush=True,
        )
        return DRILL_NOT_FIRED
    return 0


def run(job: Job, config, args: argparse.Namespace, launcher) -> int:
    """Supervise the job's replicas to the end; print where its outputs are."""
    counts = ", ".join(f"{pool} x{len(hosts)}" for pool, hosts in job.pools.items())
    trial = f", HPT trial {job.trial}" if job.trial else ""
    print(f"local_run | job {job.job_id}: {counts}{trial}", flush=True)
    print(f"local_run | job folder (base output dir): {job.output_dir}/", flush=True)
    print(f"local_run | command: {' '.join(launcher.command(job.args))}", flush=True)
    scheduling = config.job.scheduling
    restart_job = args.restart_job_on_worker_restart
    if restart_job is None:
        restart_job = scheduling.restart_job_on_worker_restart
    timeout = args.timeout if args.timeout is not None else float(scheduling.timeout_seconds)
    kill = {"seconds": None, "checkpoints": 0}
    if args.kill_after is not None:
        kill[args.kill_after[0]] = args.kill_after[1]

    containers = isinstance(launcher, images.ContainerLauncher)
    if containers:
        envs = images.container_environments(job, config.base_output_dir, config.job.env)
        print(
            f"local_run | containers of {launcher.image} on network vt-{launcher.run_id}; "
            f"the job folder is {launcher.container_dir}/ in them",
            flush=True,
        )
    else:
        envs = environments(job, config.job.env)
    # The CPUs are shared out between the replicas that train; idle ones need none.
    training = [(pool, index) for pool, index in job.replicas if pool not in job.idle_pools]
    slices = cpu_slices(len(training)) if args.split_cpus else [None] * len(training)
    cpus = dict(zip(training, slices, strict=True))
    replicas = [
        Replica(
            pool,
            index,
            list(job.args),
            envs[replica_name(pool, index)],
            cpus=cpus.get((pool, index)),
            idle=pool in job.idle_pools,
        )
        for pool, index in job.replicas
    ]
    if any(slices):
        shares = (f"{r.name} {','.join(map(str, sorted(r.cpus)))}" for r in replicas if r.cpus)
        print(f"local_run | CPUs of each replica: {'; '.join(shares)}", flush=True)

    def renew() -> dict[str, dict[str, str]]:
        return environments(job.with_new_ports(), config.job.env)

    supervisor = Supervisor(
        replicas,
        launcher,
        max_restarts=args.max_restarts,
        restart_job_on_worker_restart=restart_job,
        timeout=timeout,
        grace=args.grace,
        kill_after=kill["seconds"],
        kill_at_checkpoint=kill["checkpoints"],
        kill_replica=args.kill_replica,
        checkpoint_dir=job.checkpoint_dir,
        kill_signal=args.kill_signal,
        kill_grace=args.kill_grace,
        # Restarted containers are new hosts: their ports are free again.
        renew_env=None if containers else renew,
    )
    status = supervisor.run()
    chief_env = replica_env(job, *job.replicas[0])
    if status == 0:
        print(f"local_run | model: {chief_env['AIP_MODEL_DIR']}")
        last = last_measurement(chief_env["CLOUD_ML_HP_METRIC_FILE"])
        if last:
            print(f"local_run | last metric the chief reported: {last}")
    print(f"local_run | job folder: {job.output_dir}/", flush=True)
    return status


def last_measurement(path: str) -> str:
    """``accuracy=0.91 at step 3`` from the last line cloudml-hypertune wrote ('' if none)."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = [line for line in handle.read().splitlines() if line.strip()]
        record = json.loads(lines[-1])
    except (OSError, IndexError, ValueError):
        return ""
    known = {"checkpoint_path", "global_step", "timestamp", "trial"}
    values = [f"{key}={value}" for key, value in record.items() if key not in known]
    return f"{', '.join(values)} at step {record.get('global_step', '?')} ({path})"
