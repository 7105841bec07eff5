"""Google Cloud as the tools reach it: credentials, the clients of Vertex AI and Cloud Storage,
and the lookups ``submit`` and ``upload-model`` make before they change anything (the buckets,
the image in its registry).

``VERTEX_API_ENDPOINT=http://127.0.0.1:PORT`` sends every call here (Vertex, Cloud Storage, the
registry) to a local stand-in over REST without credentials: the tests use it. A failure is a
``ToolError`` with exit code 1 (``errors.FAILED``): the input was fine, Google Cloud refused.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from vertex_trainer_tools import config as config_lib
from vertex_trainer_tools.errors import FAILED, ToolError

logger = logging.getLogger(__name__)

ENDPOINT_ENV = "VERTEX_API_ENDPOINT"
PREBUILT_IMAGE_HOSTS = ("docker.pkg.dev/vertex-ai/", "docker.pkg.dev/vertex-ai-restricted/")
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
LOGIN_HINT = "run `gcloud auth application-default login`"


def endpoint() -> str | None:
    """The local stand-in's URL (``VERTEX_API_ENDPOINT``), or None for Google Cloud itself."""
    return os.environ.get(ENDPOINT_ENV, "").rstrip("/") or None


def default_credentials():
    """Application Default Credentials, or one line saying how to get them."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        credentials, _ = google.auth.default(
            scopes=["https://www.googleapis.com/auth/cloud-platform"]
        )
    except DefaultCredentialsError:
        raise ToolError(
            f"no Google Cloud credentials found: {LOGIN_HINT}", exit_code=FAILED
        ) from None
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
            raise ToolError(
                f"bucket gs://{name} does not exist: run `make gcp-setup`", exit_code=FAILED
            ) from None
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
        raise ToolError(
            f"bucket gs://{name} is in {location or 'an unknown location'} but jobs run in "
            f"{cfg.region}: use a bucket in {cfg.region} (or change region in {cfg.path})",
            exit_code=FAILED,
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
        raise ToolError(
            f"image {image_uri} not found in its registry: run `make build-push`",
            exit_code=FAILED,
        )
    if response.status_code >= 400:
        logger.warning("Could not check image %s (HTTP %d)", image_uri, response.status_code)


def upload(client, uri: str, path: Path) -> None:
    from google.api_core import exceptions

    bucket_name, _, blob_name = uri[len("gs://") :].partition("/")
    try:
        client.bucket(bucket_name).blob(blob_name).upload_from_filename(str(path))
    except exceptions.GoogleAPICallError as error:
        raise ToolError(
            f"cannot upload {path} to {uri}: {error.message}", exit_code=FAILED
        ) from None


class Clients:
    """Vertex's Job and Model services and Cloud Storage, made when first needed."""

    def __init__(self, cfg: config_lib.Config):
        from google.auth.credentials import AnonymousCredentials

        self.cfg = cfg
        self.endpoint = endpoint()
        self.credentials = AnonymousCredentials() if self.endpoint else default_credentials()

    def _options(self):
        from google.api_core.client_options import ClientOptions

        host = self.endpoint or f"{self.cfg.region}-aiplatform.googleapis.com"
        return {
            "credentials": self.credentials,
            "transport": "rest" if self.endpoint else "grpc",
            "client_options": ClientOptions(api_endpoint=host),
        }

    def jobs(self):
        from google.cloud import aiplatform_v1

        return aiplatform_v1.JobServiceClient(**self._options())

    def models(self):
        from google.cloud import aiplatform_v1

        return aiplatform_v1.ModelServiceClient(**self._options())

    def storage(self):
        return storage_client(self.cfg, self.credentials, self.endpoint)
