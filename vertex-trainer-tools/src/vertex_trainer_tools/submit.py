"""Submit the training job or the tuning study described in ``vertex.yaml`` to Vertex AI.

    vertex-tools submit [--hpt] [--package] [--dry-run] [--no-sync] [--tag TAG] [-- ARGS...]
    vertex-tools submit --gcloud-config [--hpt]     # the same spec as YAML for gcloud --config

It submits the image named in the config (``make build-push`` builds it) as a custom-container
``CustomJob``, or with ``--package`` an sdist of this project run by the prebuilt container of
``python_package.executor_image_uri`` (with vertex-trainer-runtime's sdist before it, when the
project pins the runtime: Vertex installs every package URI); ``--hpt`` wraps the job in a
``HyperparameterTuningJob``. ``--dry-run`` prints the exact request body (camelCase JSON, as
``CustomJob.to_dict()`` gives it) without credentials or network. Arguments after ``--`` are
appended to ``job.args``.

Every check that can fail runs before the first API call, each failure being one ``ERROR:``
line. ``VERTEX_API_ENDPOINT=http://127.0.0.1:PORT`` sends every API call (Vertex, Cloud Storage,
the registry check) to a local stand-in over REST without credentials: the tests use it.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

from build import BuildBackendException, BuildException, ProjectBuilder
from google.protobuf import json_format
from pyproject_hooks import quiet_subprocess_runner

from vertex_trainer_tools import cloud, image_dates, preflight, runtime_package, vertex_limits
from vertex_trainer_tools import config as config_lib
from vertex_trainer_tools.cloud import (
    check_buckets,
    check_image,
    default_credentials,
    storage_client,
    upload,
)
from vertex_trainer_tools.errors import FAILED, ToolError
from vertex_trainer_tools.render import (
    apply_run_options,
    build_custom_job,
    build_hpt_job,
    experiment_run,
    run_options,
    unique_display_name,
    write_gcloud_config,
)

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Checks before any API call.


def offline_problems(
    cfg: config_lib.Config,
    hpt: bool,
    package: bool,
    image_uri: str,
    extra_args: list[str] | None = None,
) -> list[str]:
    """What would make Vertex refuse the job (or tune nothing), knowable before any API call:
    the config, Vertex's names, the trainer's arguments (``job.args``, then ``extra_args``: the
    ``ARGS`` after ``--``) and, for a study, its parameters and metric."""
    problems = []
    if hpt and cfg.hpt is None:
        problems.append(f"{cfg.path}: hpt: missing: describe the study there to tune")
    why = package and image_dates.package_problem(cfg)
    if why:
        problems.append(why)
    if not package and not re.match(r"^[a-z0-9.-]+(:[0-9]+)?/[^:@\s]+[:@][^\s]+$", image_uri):
        problems.append(f"image {image_uri!r} is not a full image URI (HOST/PATH:TAG)")
    elif not package and vertex_limits.image_reference_problem(image_uri, need_host=True):
        problems.append(f"image {vertex_limits.image_reference_problem(image_uri, True)}")
    problems += preflight.problems(cfg, hpt=hpt, extra_args=extra_args or ())
    if cfg.job.experiment and not cfg.job.service_account:
        problems.append(f"{cfg.path}: job.service_account: an experiment needs a service account")
    return problems


def init_sdk(cfg: config_lib.Config, credentials, endpoint: str | None) -> None:
    from google.cloud import aiplatform

    options: dict[str, Any] = {}
    if endpoint:
        options = {"api_endpoint": endpoint, "api_transport": "rest"}
    try:
        aiplatform.init(
            project=cfg.project,
            location=cfg.region,
            staging_bucket=cfg.staging_bucket,
            credentials=credentials,
            **options,
        )
    except ValueError as error:  # never the SDK's whole list of regions: one line
        why = "not a Vertex AI region" if "region" in str(error) else str(error).splitlines()[0]
        raise ToolError(f"{cfg.path}: region: {cfg.region!r}: {why}") from None


def log_hint(hpt: bool, resource_name: str, region: str) -> str:
    kind = "hp-tuning-jobs" if hpt else "custom-jobs"
    job_id = resource_name.rsplit("/", 1)[-1]
    return f"gcloud ai {kind} stream-logs {job_id} --region={region}"


def submit(args: argparse.Namespace) -> int:
    """``vertex-tools submit``, ``submit-hpt`` (``--hpt``) and ``gcloud-config``."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    # google-api-core warns, once per generated module, about Python versions it will drop.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.api_core\..*")
    cfg = config_lib.load(args.config)
    why = args.tag and vertex_limits.tag_problem(args.tag)
    if why:
        raise ToolError(f"--tag (TAG=): {why}")
    offline = args.dry_run or args.gcloud_config
    image_uri = args.image or (cfg.image_uri_with_tag(args.tag) if args.tag else cfg.image_uri)
    trainer_args = list(cfg.job.args) + list(args.trainer_args)
    problems = offline_problems(cfg, args.hpt, args.package, image_uri, args.trainer_args)
    if args.display_name and len(args.display_name) > vertex_limits.DISPLAY_NAME_LIMIT:
        limit = vertex_limits.DISPLAY_NAME_LIMIT
        problems.insert(0, f"--display-name: must be at most {limit} characters long")
    placeholders = cfg.placeholders()
    if offline:
        for line in placeholders:
            print(f"WARNING: {line} (submitting refuses it)", file=sys.stderr)
    else:
        problems = placeholders + problems
    if args.upload_model and (args.hpt or not args.sync):
        why = "a study has no one model" if args.hpt else "SYNC=0 returns before the job ends"
        problems.append(f"UPLOAD=1 (--upload-model) follows a job that succeeded: {why}")
    if args.upload_model and not cfg.model.serving_image:
        problems.append(f"{cfg.path}: model.serving_image: missing for --upload-model")
    elif args.upload_model and image_dates.serving_problem(cfg):
        problems.append(image_dates.serving_problem(cfg))
    if problems:
        raise ToolError(*problems)
    dated = [("python_package.executor_image_uri", cfg.python_package)] if args.package else []
    dated += [("model.serving_image", cfg.model)] if args.upload_model else []
    for field, section in dated:  # past its end of patch (past availability: refused above)
        why = image_dates.warning(getattr(section, field.split(".")[1]))
        if why:
            print(f"WARNING: {cfg.path}: {field}: {why}", file=sys.stderr)
    if args.hpt and cfg.job.experiment:
        print(
            f"WARNING: {cfg.path}: job.experiment is not used by tuning studies "
            "(HyperparameterTuningJob.run takes no experiment): trials are not tracked; "
            "use job.tensorboard for them",
            file=sys.stderr,
        )

    base = args.display_name or (cfg.hpt.display_name if args.hpt else cfg.job.display_name)
    display_name = unique_display_name(base)

    stand_in = cloud.endpoint()
    from google.auth.credentials import AnonymousCredentials

    if offline or stand_in:
        credentials = AnonymousCredentials()
    else:
        credentials = default_credentials()
    init_sdk(cfg, credentials, None if offline else stand_in)

    client = None
    if not offline:
        client = storage_client(cfg, credentials, stand_in)
        if not args.skip_remote_checks:
            check_buckets(cfg, client)
            if not args.package:
                check_image(image_uri, credentials, stand_in)

    packages: list[str] = []
    sdists: list[Path] = []
    if args.package:
        sdists = package_sdists(Path.cwd(), Path(args.dist_dir))
        packages = [package_uri(cfg, display_name, sdist) for sdist in sdists]
        for sdist, package in zip(sdists, packages, strict=True):
            if offline:
                print(f"Built {sdist} (not uploaded: would go to {package})", file=sys.stderr)
            else:
                upload(client, package, sdist)
                print(f"Uploaded {sdist} to {package}")

    run_id = experiment_run(cfg, display_name) if cfg.job.experiment and not args.hpt else None
    job = build_custom_job(cfg, display_name, image_uri, trainer_args, packages, run_id)
    # gcloud makes no run before the job: the YAML names none, and the trainer makes it.
    options = run_options(cfg, args.hpt, None if args.gcloud_config else run_id)
    hpt_job = build_hpt_job(cfg, display_name, job) if args.hpt else None

    if offline:
        if hpt_job is None:
            apply_run_options(job.job_spec, options, cfg)
            request = job.to_dict()
        else:
            request = json_format.MessageToDict(study_request(cfg, hpt_job, options)._pb)
        if args.gcloud_config:
            command = write_gcloud_config(cfg, request, args.hpt, display_name)
            for sdist, package in zip(sdists, packages, strict=True):
                print(f"gcloud storage cp {sdist} {package}")
            print(" \\\n    ".join(command))
        else:
            print(json.dumps(request, indent=2))
        if args.upload_model:
            print("The model upload would follow a job that succeeded", file=sys.stderr)
        return 0
    if hpt_job is not None and not args.sync:
        return create_study(cfg, hpt_job, options, credentials, stand_in)
    return run(cfg, args, job, hpt_job, options)


def console_url(resource_name: str) -> str:
    """The Cloud console page of a training job or study (``projects/P/locations/L/KIND/ID``)."""
    _, project, _, location, _, job_id = resource_name.split("/")
    return (
        f"https://console.cloud.google.com/vertex-ai/locations/{location}/training/{job_id}"
        f"?project={project}"
    )


def print_where(resource_name: str, hpt: bool, region: str) -> None:
    print(f"Submitted {resource_name}")
    print(f"  view:  {console_url(resource_name)}")
    print(f"  logs:  {log_hint(hpt, resource_name, region)}", flush=True)


def study_request(cfg, hpt_job, options):
    """The HyperparameterTuningJob that ``hpt_job.run(**options)`` would send, as a message of
    our own (the SDK's stays private until the study exists)."""
    from google.cloud import aiplatform_v1

    study = aiplatform_v1.HyperparameterTuningJob.from_json(json.dumps(hpt_job.to_dict()))
    apply_run_options(study.trial_job_spec, options, cfg)
    return study


def create_study(cfg, hpt_job, options, credentials, endpoint: str | None) -> int:
    """Create the study and return (``SYNC=0``). The SDK's ``run(sync=False)`` would keep a
    polling thread that Python joins at exit, so the request goes through the public GAPIC
    client, with the run options applied as the SDK applies them."""
    from google.api_core import exceptions
    from google.api_core.client_options import ClientOptions
    from google.cloud import aiplatform_v1

    study = study_request(cfg, hpt_job, options)
    client = aiplatform_v1.JobServiceClient(
        credentials=credentials,
        transport="rest" if endpoint else "grpc",
        client_options=ClientOptions(
            api_endpoint=endpoint or f"{cfg.region}-aiplatform.googleapis.com"
        ),
    )
    try:
        created = client.create_hyperparameter_tuning_job(
            parent=f"projects/{cfg.project}/locations/{cfg.region}",
            hyperparameter_tuning_job=study,
        )
    except exceptions.GoogleAPICallError as error:
        raise ToolError(
            f"Vertex AI refused the request: {error.message}", exit_code=FAILED
        ) from None
    print_where(created.name, True, cfg.region)
    return 0


def create_experiment_run(experiment: str, run: str) -> None:
    """The job's run, made before the job as ``submit(experiment_run=)`` needs; the chief logs
    to it (``vertex_trainer_runtime.tracking``), resuming it after a restart. The experiment is
    made if missing, without a backing TensorBoard (a billed resource)."""
    from google.api_core import exceptions
    from google.cloud import aiplatform

    try:
        found = aiplatform.Experiment.get_or_create(experiment)
        aiplatform.ExperimentRun.create(run, experiment=found)
    except (exceptions.GoogleAPICallError, RuntimeError) as error:
        why = getattr(error, "message", None) or str(error).splitlines()[0]
        raise ToolError(
            f"Vertex AI Experiments refused run {run} of {experiment}: {why}", exit_code=FAILED
        ) from None
    print(f"Experiment run {experiment}-{run}: the chief logs params and metrics to it")


def run(cfg, args, job, hpt_job, options) -> int:
    """Create the job, print where to watch it, and (``--sync``) wait for its end."""
    from google.api_core import exceptions

    if hpt_job is None and options.get("experiment_run"):
        create_experiment_run(options["experiment"], options["experiment_run"])
    try:
        if hpt_job is None:
            job.submit(**options)
            resource = job
        else:
            hpt_job.run(sync=False, **options)
            hpt_job.wait_for_resource_creation()
            resource = hpt_job
        print_where(resource.resource_name, hpt_job is not None, cfg.region)
        if not args.sync:
            return 0
        if hpt_job is None:
            job.wait_for_completion()
        else:
            hpt_job.wait()
    except RuntimeError as error:
        resource = hpt_job or job
        state = resource.state.name
        message = resource.error.message or str(error).splitlines()[0]
        raise ToolError(
            f"{resource.resource_name} ended in {state}: {message}", exit_code=FAILED
        ) from None
    except exceptions.GoogleAPICallError as error:
        raise ToolError(
            f"Vertex AI refused the request: {error.message}", exit_code=FAILED
        ) from None
    print(f"{resource.resource_name} ended in {resource.state.name}")
    if args.upload_model:
        from vertex_trainer_tools.model_upload import upload_model

        return upload_model(cfg, resource.resource_name)
    return 0


# ---------------------------------------------------------------------------------------------
# Python-package mode: the sdist Vertex's prebuilt container pip-installs.


def build_sdist(project_dir: Path, dist_dir: Path) -> Path:
    """The sdist Vertex's prebuilt container pip-installs, built by ``build`` (PEP 517).

    It builds in this environment (no isolated one to download), so it works offline.
    """
    before = set(project_dir.glob("*.egg-info"))
    try:
        builder = ProjectBuilder(project_dir, runner=quiet_subprocess_runner)
        missing = builder.check_dependencies("sdist")
        if missing:
            needed = ", ".join(sorted(next(iter(group)) for group in missing))
            raise ToolError(f"building the sdist needs {needed}: pip install it", exit_code=FAILED)
        return Path(builder.build("sdist", dist_dir))
    except (BuildException, BuildBackendException) as error:
        raise ToolError(
            f"building the sdist of {project_dir} failed: {error}", exit_code=FAILED
        ) from None
    finally:  # setuptools leaves its egg-info in the project: not the user's file
        for leftover in set(project_dir.glob("*.egg-info")) - before:
            shutil.rmtree(leftover, ignore_errors=True)


def package_sdists(project_dir: Path, dist_dir: Path) -> list[Path]:
    """The sdists of package mode, in the order Vertex installs them: the runtime's first when
    the project pins vertex-trainer-runtime (so the trainer's requirement on it is met by the
    job's own package, never by the index), then the trainer's."""
    runtime = runtime_package.sdist(project_dir, dist_dir)
    trainer = build_sdist(project_dir, dist_dir)
    return [runtime, trainer] if runtime else [trainer]


def package_uri(cfg: config_lib.Config, display_name: str, sdist: Path) -> str:
    return f"{cfg.staging_bucket}/packages/{display_name}/{sdist.name}"
