"""Register a job's exported model in the Vertex AI Model Registry (``make upload-model``).

    vertex-tools upload-model [--job JOB] [--dry-run] [--metric VALUE]

``--job`` is a Vertex CustomJob (its id, as ``make submit`` prints it, or its resource name:
the model is ``<baseOutputDirectory>/model``, read with ``customJobs.get``) or a local job
folder of ``make train-local`` (its ``model/``); the default is the newest local job,
``outputs/local/latest``. A local model is first copied to
``<staging_bucket>/models/<job folder>/model`` (Vertex serves from Cloud Storage only).

The request is Vertex's ``UploadModelRequest`` (``ModelService.UploadModel``): ``model:`` of
vertex.yaml gives the display name, serving image, environment, description and labels; the
labels add ``job_id`` and the final metric (``hpt.metric``). Label values allow only
``[a-z0-9_-]``, so a value is written with ``_`` for its decimal point: 0.8125 is ``0_8125``
(the version description keeps the exact value). When a model with the display name already
exists in the region, the upload becomes its new version (``parent_model``). ``--dry-run``
prints the request as JSON and changes nothing: for a local job it needs no credentials nor
network; a Vertex job is read from Vertex. ``parent_model`` is looked up only when uploading.
``VERTEX_API_ENDPOINT`` sends every call to a local stand-in, as for submit.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import json_format

from vertex_trainer_tools import config as config_lib
from vertex_trainer_tools import image_dates
from vertex_trainer_tools.cloud import Clients, upload
from vertex_trainer_tools.errors import FAILED, ToolError
from vertex_trainer_tools.local_run import folders
from vertex_trainer_tools.prediction_images import ARTIFACTS, serving_image_problem
from vertex_trainer_tools.preflight import export_file
from vertex_trainer_tools.vertex_limits import label_key, label_text

JOBS_ROOT = "outputs/local"
JOB_NAME_RE = re.compile(r"^projects/[^/]+/locations/([^/]+)/customJobs/\d+$")
CHIEF_METRICS = Path("hypertune", "workerpool0-0", "output.metrics")
METADATA_FILE = "model_metadata.json"  # XGBoost's export: {"metric": {"value": ...}}


@dataclass
class Source:
    """The model of one job: where it is and what the job scored."""

    job_id: str  # the Vertex job's id or the local job folder's name
    model_dir: str  # gs://... (a Vertex job) or a local folder
    metric: float | None = None

    @property
    def local(self) -> bool:
        return not self.model_dir.startswith("gs://")


# ---------------------------------------------------------------------------------------------
# Which model, and what it scored.


def find_source(cfg: config_lib.Config, job: str, jobs_root: str, clients) -> Source:
    """The model of ``job``: a Vertex job id or name, a local job folder, or the newest one."""
    if re.fullmatch(r"\d+", job) or JOB_NAME_RE.match(job):
        return vertex_source(cfg, job, clients)
    if job in ("", folders.LATEST):
        folder = folders.read_latest(jobs_root)
        if folder is None:
            raise ToolError(
                f"no job to upload: {Path(jobs_root) / folders.LATEST} does not exist "
                "(run make train-local, or JOB=<Vertex job id>)"
            )
    else:
        folder = Path(job).expanduser()
        if not folder.is_dir():
            raise ToolError(
                f"JOB: {job!r} is neither a job folder nor a Vertex job id "
                f"(e.g. JOB={Path(jobs_root) / folders.LATEST} or JOB=1234567890)"
            )
    folder = folder.resolve()
    model_dir = folder / "model"
    if not model_dir.is_dir():
        raise ToolError(f"{folder}: no model/ in it: the job has not exported a model yet")
    return Source(folder.name, str(model_dir), local_metric(cfg, folder))


def vertex_source(cfg: config_lib.Config, job: str, clients) -> Source:
    """A Vertex CustomJob that SUCCEEDED: its model is ``<baseOutputDirectory>/model``."""
    from google.api_core import exceptions

    name = job if "/" in job else f"projects/{cfg.project}/locations/{cfg.region}/customJobs/{job}"
    try:
        found = clients.jobs().get_custom_job(name=name)
    except exceptions.NotFound:
        raise ToolError(
            f"job {name} not found (is it a CustomJob of {cfg.region}?)", exit_code=FAILED
        ) from None
    except exceptions.GoogleAPICallError as error:
        raise ToolError(f"cannot read job {name}: {error.message}", exit_code=FAILED) from None
    state = found.state.name
    if state != "JOB_STATE_SUCCEEDED":
        raise ToolError(
            f"job {name} is {state}: only a job that SUCCEEDED has a model", exit_code=FAILED
        )
    output = found.job_spec.base_output_directory.output_uri_prefix.rstrip("/")
    if not output:
        raise ToolError(
            f"job {name} has no baseOutputDirectory: where its model is is unknown",
            exit_code=FAILED,
        )
    return Source(name.rsplit("/", 1)[-1], f"{output}/model")


def local_metric(cfg: config_lib.Config, folder: Path) -> float | None:
    """The chief's last hypertune report of ``hpt.metric`` (the exported model's, by the
    trainer's contract), else the metric XGBoost's export metadata records."""
    tag = cfg.hpt.metric.id if cfg.hpt else ""
    try:
        lines = (folder / CHIEF_METRICS).read_text(encoding="utf-8").split("\n")
        records = [json.loads(line) for line in lines if line.strip()]
        values = [float(record[tag]) for record in records if tag in record]
        if values:
            return values[-1]
    except (OSError, ValueError):
        pass
    try:
        metadata = json.loads((folder / "model" / METADATA_FILE).read_text(encoding="utf-8"))
        return float(metadata["metric"]["value"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def artifact_problem(image: str, model_dir: str | Path, files: set[str] | None = None) -> str:
    """'' when ``model_dir`` holds the file ``image`` serves, else why not (one line).
    ``files``: the names in a Cloud Storage folder; None: list the local ``model_dir``.
    Images this table does not know (custom containers) are not checked."""
    if files is None:
        if not Path(model_dir).is_dir():
            return (
                f"{model_dir}: no such folder (the job's model/, e.g. outputs/local/latest/model)"
            )
        files = {path.name for path in Path(model_dir).iterdir() if path.is_file()}
    for marker, served, what, _ in ARTIFACTS:
        if marker in image:
            if files & set(served):
                return ""
            return (
                f"{model_dir}: not {what}: {image.rsplit('/', 1)[-1]} serves a folder with "
                f"{' or '.join(served)} (set model.serving_image to the image of this export)"
            )
    return ""


def bucket_files(client, uri: str) -> set[str] | None:
    """The names of the objects right under the ``gs://`` folder ``uri`` (None: unreadable)."""
    from google.api_core import exceptions

    bucket, _, prefix = uri[len("gs://") :].partition("/")
    try:
        names = [blob.name for blob in client.list_blobs(bucket, prefix=f"{prefix}/")]
    except exceptions.GoogleAPICallError as error:
        print(f"WARNING: cannot list {uri} ({error.message}): not checked", file=sys.stderr)
        return None
    return {name[len(prefix) + 1 :] for name in names if "/" not in name[len(prefix) + 1 :]}


# ---------------------------------------------------------------------------------------------
# The request.


def build_request(cfg: config_lib.Config, source: Source, artifact_uri: str, parent_model: str):
    """``aiplatform_v1.UploadModelRequest`` for ``source``'s model at ``artifact_uri``."""
    from google.cloud import aiplatform_v1

    model = cfg.model
    labels = {**model.labels, "job_id": label_text(source.job_id)}
    summary = f"job {source.job_id}"
    if source.metric is not None and cfg.hpt is not None:
        labels[label_key(cfg.hpt.metric.id)] = label_text(source.metric)
        summary += f": {cfg.hpt.metric.id}={source.metric:g}"
    env = [aiplatform_v1.EnvVar(name=k, value=v) for k, v in model.env.items()]
    return aiplatform_v1.UploadModelRequest(
        parent=f"projects/{cfg.project}/locations/{cfg.region}",
        parent_model=parent_model,
        model=aiplatform_v1.Model(
            display_name=model.display_name or cfg.job.display_name,
            description=model.description,
            version_description=summary,
            artifact_uri=artifact_uri,
            container_spec=aiplatform_v1.ModelContainerSpec(image_uri=model.serving_image, env=env),
            labels=labels,
        ),
    )


# ---------------------------------------------------------------------------------------------
# Talking to Vertex and Cloud Storage.


def parent_model(client, cfg: config_lib.Config, display_name: str) -> str:
    """The model named ``display_name`` in the region ('' if none): the upload's parent."""
    quoted = display_name.replace("\\", "\\\\").replace('"', '\\"')
    pager = client.list_models(
        request={
            "parent": f"projects/{cfg.project}/locations/{cfg.region}",
            "filter": f'display_name="{quoted}"',
        }
    )
    return next((model.name for model in pager), "")


def copy_to_bucket(client, local_dir: Path, uri: str) -> int:
    """Copy every file of ``local_dir`` under ``uri``; the number of files."""
    files = sorted(path for path in local_dir.rglob("*") if path.is_file())
    for path in files:
        upload(client, f"{uri}/{path.relative_to(local_dir).as_posix()}", path)
    return len(files)


def upload_model(cfg: config_lib.Config, job: str = "", *, dry_run: bool = False, **options):
    """Find the job's model, check it against the serving image, upload it; 0 when done."""
    if not cfg.model.serving_image:
        why = serving_image_problem("", export_file())
        raise ToolError(f"{cfg.path}: model.serving_image: {why}")
    if image_dates.serving_problem(cfg):  # past its end of availability
        raise ToolError(image_dates.serving_problem(cfg))
    dated = image_dates.warning(cfg.model.serving_image)  # past its end of patch
    if dated:
        print(f"WARNING: {cfg.path}: model.serving_image: {dated}", file=sys.stderr)
    placeholders = cfg.placeholders()
    if placeholders and not dry_run:
        raise ToolError(*placeholders)
    for line in placeholders:
        print(f"WARNING: {line} (uploading refuses it)", file=sys.stderr)
    remote_job = bool(re.fullmatch(r"\d+", job) or JOB_NAME_RE.match(job))
    clients = Clients(cfg) if remote_job or not dry_run else None  # a dry run only reads
    source = find_source(cfg, job, options.get("jobs_root", JOBS_ROOT), clients)
    if options.get("metric") is not None:
        source.metric = options["metric"]
    artifact_uri = source.model_dir
    files = None if source.local else bucket_files(clients.storage(), source.model_dir)
    if source.local or files is not None:
        problem = artifact_problem(cfg.model.serving_image, source.model_dir, files)
        if problem:
            raise ToolError(problem)
    if source.local:
        artifact_uri = f"{cfg.staging_bucket}/models/{source.job_id}/model"
    if source.metric is None and cfg.hpt is not None:
        print(
            f"WARNING: no final {cfg.hpt.metric.id} found for job {source.job_id}: "
            "the labels carry the job id only (--metric VALUE adds it)",
            file=sys.stderr,
        )
    display_name = cfg.model.display_name or cfg.job.display_name
    if dry_run:
        request = build_request(cfg, source, artifact_uri, "")
        if source.local:
            print(f"Not copied: {source.model_dir} would go to {artifact_uri}", file=sys.stderr)
        print(
            f"parent_model: set at upload if a model named {display_name!r} exists in "
            f"{cfg.region} (the upload is then its new version)",
            file=sys.stderr,
        )
        print(json.dumps(json_format.MessageToDict(request._pb), indent=2))
        return 0
    return send(cfg, clients, source, artifact_uri, display_name)


def send(cfg, clients: Clients, source: Source, artifact_uri: str, display_name: str) -> int:
    from google.api_core import exceptions

    try:
        if source.local:
            count = copy_to_bucket(clients.storage(), Path(source.model_dir), artifact_uri)
            print(f"Copied {count} files of {source.model_dir} to {artifact_uri}")
        models = clients.models()
        parent = parent_model(models, cfg, display_name)
        request = build_request(cfg, source, artifact_uri, parent)
        response = models.upload_model(request=request).result(timeout=1800)
    except exceptions.GoogleAPICallError as error:
        raise ToolError(
            f"Vertex AI refused the upload: {error.message}", exit_code=FAILED
        ) from None
    kind = f"new version of {parent}" if parent else "new model"
    print(f"Uploaded {response.model} version {response.model_version_id} ({kind})")
    return 0


def command(args: argparse.Namespace) -> int:
    """``vertex-tools upload-model``."""
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.api_core\..*")
    cfg = config_lib.load(args.config)
    return upload_model(
        cfg, args.job, dry_run=args.dry_run, jobs_root=args.jobs_root, metric=args.metric
    )
