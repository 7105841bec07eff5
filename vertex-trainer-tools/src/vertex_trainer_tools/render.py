"""The Vertex AI requests of ``vertex.yaml``: built from the config only, the same for dry runs,
gcloud YAML and submission (``submit.py`` sends them).

- ``worker_pool_specs``: ``job.worker_pools`` (and ``job.reduction_server`` as pool 2) as the
  SDK's snake_case dicts;
- ``experiment_run``/``experiment_env``: the job's Experiment run and the env that names it to
  the trainer (``vertex_trainer_runtime.tracking``);
- ``run_options``: the keyword arguments of ``CustomJob.submit``/``HyperparameterTuningJob.run``
  (service account, network, scheduling: timeout, strategy, max wait, ...);
- ``apply_run_options``: what the SDK sets from those options, for dry runs and gcloud YAML;
- ``write_gcloud_config``: the YAML ``gcloud ai ... create --config`` reads.
"""

from __future__ import annotations

import datetime
import re
import shlex
from pathlib import Path
from typing import Any

from vertex_trainer_tools import config as config_lib
from vertex_trainer_tools import contract, pool_options
from vertex_trainer_tools.errors import ToolError

NAME_LIMIT = 128  # Vertex display names: at most 128 UTF-8 characters
GCLOUD_DIR = "build/gcloud"


def unique_display_name(base: str, now: datetime.datetime | None = None) -> str:
    """``<base>-<UTC timestamp>``: unique per second, within Vertex's 128 characters.

    Kept to lowercase letters, digits and '-' because it also names the job's output folder.
    """
    now = now or datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-") or "job"
    return f"{safe[: NAME_LIMIT - len(stamp) - 1].rstrip('-')}-{stamp}"


def experiment_run(cfg: config_lib.Config, display_name: str) -> str:
    """The job's Experiment run id: its display name, cut from the front (the timestamp stays)
    so that the run's context id ``<experiment>-<run>`` keeps within 128 characters."""
    room = NAME_LIMIT - len(cfg.job.experiment) - 1
    return display_name[-room:].lstrip("-") if room > 0 else ""


def experiment_env(cfg: config_lib.Config, run: str) -> dict[str, str]:
    """Full resource names (they carry project and region) of the job's experiment and run."""
    return contract.experiment_env(cfg.project, cfg.region, cfg.job.experiment, run)


def worker_pool_specs(
    cfg: config_lib.Config,
    image_uri: str,
    args: list[str],
    package_uris: list[str] | None = None,
    extra_env: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """``job.worker_pools`` as the SDK's snake_case dicts; an empty pool stays ``{}``.

    ``job.reduction_server`` becomes pool 2 (Google's image, no trainer args), after empty
    pools where needed. ``job.reservation`` goes into the machine spec of every pool but the
    Reduction Server's, whose CPU machines are not those of a GPU reservation.
    """
    variables = {**cfg.job.env, **(extra_env or {})}
    env = [{"name": name, "value": value} for name, value in variables.items()]
    affinity = cfg.job.reservation_affinity
    specs: list[dict[str, Any]] = []
    for index, pool in enumerate(cfg.job.all_pools):
        if pool.empty:
            specs.append({})
            continue
        machine: dict[str, Any] = {"machine_type": pool.machine_type}
        if pool.accelerator_count:
            machine["accelerator_type"] = pool.accelerator_type
            machine["accelerator_count"] = pool.accelerator_count
        if affinity and not (index == 2 and cfg.job.reduction_server is not None):
            machine["reservation_affinity"] = dict(affinity)
        machine.update(pool_options.machine_fields(pool))
        spec: dict[str, Any] = {
            "machine_spec": machine,
            "replica_count": pool.replica_count,
            "disk_spec": {
                "boot_disk_type": pool.boot_disk_type,
                "boot_disk_size_gb": pool.boot_disk_size_gb,
            },
            **pool_options.mount_fields(pool),
        }
        if pool.image_uri:  # a pool with its own image (e.g. Reduction Server) gets no trainer args
            spec["container_spec"] = {"image_uri": pool.image_uri}
        elif package_uris:
            spec["python_package_spec"] = {
                "executor_image_uri": cfg.python_package.executor_image_uri,
                "package_uris": list(package_uris),
                "python_module": cfg.python_package.python_module,
                "args": list(args),
                "env": env,
            }
        else:
            spec["container_spec"] = {"image_uri": image_uri, "args": list(args), "env": env}
        specs.append(spec)
    return specs


def run_options(cfg: config_lib.Config, hpt: bool, run: str | None = None) -> dict[str, Any]:
    """Keyword arguments for ``CustomJob.submit`` / ``HyperparameterTuningJob.run``; ``run``:
    the job's Experiment run (``experiment_run``), which must exist before the submit."""
    from google.cloud.aiplatform.compat.types import custom_job as custom_job_types

    job = cfg.job
    strategy = job.scheduling.strategy  # STANDARD is what Vertex does when none is given
    options: dict[str, Any] = {
        "service_account": job.service_account or None,
        "network": job.network or None,
        "timeout": job.scheduling.timeout_seconds,
        "restart_job_on_worker_restart": job.scheduling.restart_job_on_worker_restart,
        "disable_retries": job.scheduling.disable_retries,
        "enable_web_access": job.enable_web_access,
        "tensorboard": job.tensorboard or None,
        "scheduling_strategy": (
            None if strategy == "STANDARD" else custom_job_types.Scheduling.Strategy[strategy]
        ),
        "max_wait_duration": job.scheduling.max_wait,  # seconds; FLEX_START only
    }
    if not hpt:
        options["experiment"] = job.experiment or None
        options["experiment_run"] = run if job.experiment else None
    return options


def apply_run_options(spec: Any, options: dict[str, Any], cfg: config_lib.Config) -> None:
    """Set on a CustomJobSpec what the SDK's ``submit``/``run`` set from the same options.

    Used for dry runs and gcloud YAML; the tests compare the result with what the SDK POSTs.
    """
    from google.cloud.aiplatform.compat.types import custom_job as custom_job_types
    from google.protobuf import duration_pb2

    if options["service_account"]:
        spec.service_account = options["service_account"]
    if options["network"]:
        spec.network = options["network"]
    max_wait = options["max_wait_duration"]
    if (
        options["timeout"]
        or options["restart_job_on_worker_restart"]
        or options["disable_retries"]
        or options["scheduling_strategy"]
        or max_wait is not None  # 0 is a valid value: wait as long as it takes
    ):
        spec.scheduling = custom_job_types.Scheduling(
            timeout=duration_pb2.Duration(seconds=options["timeout"]),
            restart_job_on_worker_restart=options["restart_job_on_worker_restart"],
            disable_retries=options["disable_retries"],
            strategy=options["scheduling_strategy"],
            max_wait_duration=None if max_wait is None else duration_pb2.Duration(seconds=max_wait),
        )
    if options["enable_web_access"]:
        spec.enable_web_access = True
    if options["tensorboard"]:
        spec.tensorboard = options["tensorboard"]
    if options.get("experiment"):
        contexts = f"projects/{cfg.project}/locations/{cfg.region}/metadataStores/default/contexts"
        spec.experiment = f"{contexts}/{options['experiment']}"
        if options.get("experiment_run"):
            spec.experiment_run = f"{contexts}/{options['experiment']}-{options['experiment_run']}"


def build_custom_job(
    cfg: config_lib.Config,
    display_name: str,
    image_uri: str,
    args: list[str],
    package_uris: list[str] | None = None,
    run: str | None = None,
):
    """The CustomJob; ``run``: its Experiment run, named to the trainer in every pool's env."""
    from google.cloud import aiplatform

    env = experiment_env(cfg, run) if run else None
    return aiplatform.CustomJob(
        display_name=display_name,
        worker_pool_specs=worker_pool_specs(cfg, image_uri, args, package_uris, env),
        base_output_dir=f"{cfg.base_output_dir}/{display_name}",
        staging_bucket=cfg.staging_bucket,
        labels=dict(cfg.job.labels) or None,
        persistent_resource_id=cfg.job.persistent_resource_id or None,
    )


def build_hpt_job(cfg: config_lib.Config, display_name: str, custom_job):
    """The study around a fresh (never run) CustomJob, whose spec it copies."""
    from google.cloud import aiplatform
    from google.cloud.aiplatform import hyperparameter_tuning as hpt

    study = cfg.hpt
    specs: dict[str, Any] = {}
    for p in study.parameters:
        if p.type == "double":
            specs[p.id] = hpt.DoubleParameterSpec(min=p.min, max=p.max, scale=p.scale)
        elif p.type == "integer":
            specs[p.id] = hpt.IntegerParameterSpec(min=int(p.min), max=int(p.max), scale=p.scale)
        elif p.type == "discrete":
            specs[p.id] = hpt.DiscreteParameterSpec(values=list(p.values), scale=p.scale)
        else:
            specs[p.id] = hpt.CategoricalParameterSpec(values=list(p.values))
    job = aiplatform.HyperparameterTuningJob(
        display_name=display_name,
        custom_job=custom_job,
        metric_spec={study.metric_id: study.goal},
        parameter_spec=specs,
        max_trial_count=study.max_trial_count,
        parallel_trial_count=study.parallel_trial_count,
        max_failed_trial_count=study.max_failed_trial_count,
        search_algorithm=None if study.algorithm == "bayesian" else study.algorithm,
        measurement_selection=study.measurement_selection,
        labels=dict(cfg.job.labels) or None,
    )
    if study.early_stopping == "median":  # the SDK's constructor has no argument for it
        from google.cloud.aiplatform.compat.types import study as gca_study

        job._gca_resource.study_spec.median_automated_stopping_spec = (
            gca_study.StudySpec.MedianAutomatedStoppingSpec()
        )
    return job


# Vertex's boot disk when a pool names none: what a --worker-pool-spec flag (which has no disk
# keys) gets.
DEFAULT_DISK = {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100}


def gcloud_pool_flags(cfg, pools: list[dict[str, Any]]) -> list[str]:
    """The pools of a job that skips one, as gcloud's ``--worker-pool-spec`` flags.

    gcloud's ``--config`` wants a container or a package in every pool and refuses ``{}``,
    while an empty ``--worker-pool-spec=`` skips a pool (gcloud sends ``{}``, as the SDK does).
    The flags have no keys for environment variables, boot disks or reservations, and
    ``--args`` goes to every pool: a job that needs those is refused in one line.
    """
    flags, args, uris = [], None, []
    for index, pool in enumerate(pools):
        if not pool:
            flags.append("--worker-pool-spec=")
            continue
        software = pool.get("containerSpec") or pool.get("pythonPackageSpec") or {}
        disk = {**DEFAULT_DISK, **pool.get("diskSpec", {})}
        lacking = [
            what
            for what, present in (
                ("environment variables (job.env, job.experiment)", software.get("env")),
                ("boot disk settings", disk != DEFAULT_DISK),
                ("a reservation (job.reservation)", pool["machineSpec"].get("reservationAffinity")),
                ("a GPU partition size", pool["machineSpec"].get("gpuPartitionSize")),
                ("NFS or Lustre mounts", pool.get("nfsMounts") or pool.get("lustreMounts")),
                ("trainer args for one pool only", args not in (None, software.get("args", []))),
            )
            if present
        ]
        if lacking:
            raise ToolError(
                f"{cfg.path}: job.worker_pools: gcloud cannot write a skipped pool in --config, "
                f"and its --worker-pool-spec flags cannot carry {lacking[0]} (pool {index}): "
                "use make submit, which sends the skipped pool as Vertex takes it"
            )
        args = software.get("args", [])
        uris = software.get("packageUris", uris)
        machine = pool["machineSpec"]
        keys = {"machine-type": machine["machineType"], "replica-count": pool["replicaCount"]}
        if machine.get("acceleratorCount"):
            keys["accelerator-type"] = machine["acceleratorType"]
            keys["accelerator-count"] = machine["acceleratorCount"]
        if "containerSpec" in pool:
            keys["container-image-uri"] = software["imageUri"]
        else:
            keys["executor-image-uri"] = software["executorImageUri"]
            keys["python-module"] = software["pythonModule"]
        flags.append("--worker-pool-spec=" + ",".join(f"{k}={v}" for k, v in keys.items()))
    if uris:
        flags.append(f"--python-package-uris={','.join(uris)}")
    if args:
        flags.append(f"--args={gcloud_list(args)}")
    return [shlex.quote(flag) for flag in flags]


def gcloud_list(values: list[str]) -> str:
    """A gcloud list value: comma-separated, or with another delimiter (``^;^a,b;c``, gcloud
    topic escaping) when a value holds a comma."""
    if not any("," in value for value in values):
        return ",".join(values)
    delimiter = next(c for c in ";|#~@%:" if not any(c in value for value in values))
    return f"^{delimiter}^" + delimiter.join(values)


def write_gcloud_config(cfg, request: dict[str, Any], hpt: bool, display_name: str) -> list[str]:
    """Write the YAML ``gcloud ai ... create --config`` reads; return the command to run it."""
    import yaml

    out = Path(GCLOUD_DIR)
    out.mkdir(parents=True, exist_ok=True)
    if hpt:
        body = {k: v for k, v in request.items() if k != "displayName"}
        path = out / "hpt-job.yaml"
        command = [
            "gcloud ai hp-tuning-jobs create",
            f"--project={cfg.project}",
            f"--region={cfg.region}",
            f"--display-name={display_name}",
            f"--max-trial-count={cfg.hpt.max_trial_count}",
            f"--parallel-trial-count={cfg.hpt.parallel_trial_count}",
            f"--config={path}",
        ]
    else:
        body = dict(request["jobSpec"])
        path = out / "custom-job.yaml"
        command = [
            "gcloud ai custom-jobs create",
            f"--project={cfg.project}",
            f"--region={cfg.region}",
            f"--display-name={display_name}",
            f"--config={path}",
        ]
        if {} in body["workerPoolSpecs"]:  # the pools go on the command line
            command[-1:-1] = gcloud_pool_flags(cfg, body.pop("workerPoolSpecs"))
    if cfg.job.labels:  # a CustomJob's labels are not part of the spec in --config
        labels = ",".join(f"{key}={value}" for key, value in cfg.job.labels.items())
        command.insert(-1, f"--labels={labels}")
    header = (
        f"# Generated from {cfg.path} by `make gcloud-config`; edit {cfg.path}, not this file.\n"
    )
    if not hpt and "workerPoolSpecs" not in body:
        header += "# The worker pools are --worker-pool-spec flags: --config cannot skip a pool.\n"
    path.write_text(header + yaml.safe_dump(body, sort_keys=False))
    return command
