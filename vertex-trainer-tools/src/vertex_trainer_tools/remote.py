"""What ``vertex-tools submit`` checks in the cloud before creating a job, and the sdist of
Python-package mode (built with ``build``, uploaded to the staging bucket).

Every failure is a ``SubmitError``: one ``ERROR:`` line each, before the first Vertex call.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from build import BuildBackendException, BuildException, ProjectBuilder
from pyproject_hooks import quiet_subprocess_runner

from vertex_trainer_tools import config as config_lib
from vertex_trainer_tools import preflight, vertex_limits

logger = logging.getLogger(__name__)

PREBUILT_IMAGE_HOSTS = ("docker.pkg.dev/vertex-ai/", "docker.pkg.dev/vertex-ai-restricted/")
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
LOGIN_HINT = "run `gcloud auth application-default login`"


class SubmitError(Exception):
    """A problem found before (or reported by) Vertex: printed as one ``ERROR:`` line each."""

    def __init__(self, *lines: str):
        self.lines = list(lines)
        super().__init__("\n".join(lines))


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
    if package and (cfg.python_package is None or not cfg.python_package.executor_image_uri):
        problems.append(f"{cfg.path}: python_package.executor_image_uri: missing for --package")
    if not package and not re.match(r"^[a-z0-9.-]+(:[0-9]+)?/[^:@\s]+[:@][^\s]+$", image_uri):
        problems.append(f"image {image_uri!r} is not a full image URI (HOST/PATH:TAG)")
    elif not package and vertex_limits.image_reference_problem(image_uri, need_host=True):
        problems.append(f"image {vertex_limits.image_reference_problem(image_uri, True)}")
    problems += preflight.problems(cfg, hpt=hpt, extra_args=extra_args or ())
    if cfg.job.experiment and not cfg.job.service_account:
        problems.append(f"{cfg.path}: job.service_account: an experiment needs a service account")
    return problems


def default_credentials():
    """Application Default Credentials, or one line saying how to get them."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        credentials, _ = google.auth.default(
            scopes=["https://www.googleapis.com/auth/cloud-platform"]
        )
    except DefaultCredentialsError:
        raise SubmitError(f"no Google Cloud credentials found: {LOGIN_HINT}") from None
    return credentials


def storage_client(cfg: config_lib.Config, credentials, endpoint: str | None):
    from google.cloud import storage

    options = {"api_endpoint": endpoint} if endpoint else None
    return storage.Client(project=cfg.project, credentials=credentials, client_options=options)


MULTI_REGIONS = {"us": "us-", "eu": "europe-", "asia": "asia-"}


def check_buckets(cfg: config_lib.Config, client) -> None:
    """The staging and output buckets exist and sit in (or, multi-region, around) the region."""
    from google.api_core import exceptions

    names = dict.fromkeys([cfg.bucket_name, cfg.base_output_dir[5:].split("/", 1)[0]])
    for name in names:
        try:
            bucket = client.get_bucket(name)
        except exceptions.NotFound:
            raise SubmitError(f"bucket gs://{name} does not exist: run `make gcp-setup`") from None
        except exceptions.GoogleAPICallError as error:
            logger.warning("Could not check bucket gs://%s (%s)", name, error.message)
            continue
        location = (bucket.location or "").lower()
        if location == cfg.region:
            continue
        prefix = MULTI_REGIONS.get(location)
        if prefix and cfg.region.startswith(prefix):
            logger.warning(
                "Bucket gs://%s is multi-region %s: Vertex's /gcs/ mount wants a bucket in %s",
                name,
                location.upper(),
                cfg.region,
            )
            continue
        raise SubmitError(
            f"bucket gs://{name} is in {location or 'an unknown location'} but jobs run in "
            f"{cfg.region}: use a bucket in {cfg.region} (or change region in {cfg.path})"
        )


def check_image(image_uri: str, credentials, endpoint: str | None) -> None:
    """The image exists in its registry (Artifact Registry / gcr.io), else `make build-push`."""
    host, _, rest = image_uri.partition("/")
    if any(marker in image_uri for marker in PREBUILT_IMAGE_HOSTS) or not (
        host.endswith("docker.pkg.dev") or host.endswith("gcr.io")
    ):
        return
    path, tag = (rest.split("@", 1) if "@" in rest else rest.rsplit(":", 1)) if rest else ("", "")
    url = f"{endpoint or 'https://' + host}/v2/{path}/manifests/{tag}"
    import requests

    if endpoint:
        session = requests.Session()
    else:
        from google.auth.transport.requests import AuthorizedSession

        session = AuthorizedSession(credentials)
    try:
        response = session.head(url, headers={"Accept": ", ".join(MANIFEST_TYPES)}, timeout=30)
    except requests.RequestException as error:
        logger.warning("Could not check image %s (%s)", image_uri, error)
        return
    if response.status_code == 404:
        raise SubmitError(f"image {image_uri} not found in its registry: run `make build-push`")
    if response.status_code >= 400:
        logger.warning("Could not check image %s (HTTP %d)", image_uri, response.status_code)


# ---------------------------------------------------------------------------------------------
# Python-package mode.


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
            raise SubmitError(f"building the sdist needs {needed}: pip install it")
        return Path(builder.build("sdist", dist_dir))
    except (BuildException, BuildBackendException) as error:
        raise SubmitError(f"building the sdist of {project_dir} failed: {error}") from None
    finally:  # setuptools leaves its egg-info in the project: not the user's file
        for leftover in set(project_dir.glob("*.egg-info")) - before:
            shutil.rmtree(leftover, ignore_errors=True)


def package_uri(cfg: config_lib.Config, display_name: str, sdist: Path) -> str:
    return f"{cfg.staging_bucket}/packages/{display_name}/{sdist.name}"


def upload(client, uri: str, path: Path) -> None:
    from google.api_core import exceptions

    bucket_name, _, blob_name = uri[len("gs://") :].partition("/")
    try:
        client.bucket(bucket_name).blob(blob_name).upload_from_filename(str(path))
    except exceptions.GoogleAPICallError as error:
        raise SubmitError(f"cannot upload {path} to {uri}: {error.message}") from None
