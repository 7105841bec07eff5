"""Read and check ``vertex.yaml``, the one file that holds this project's Google Cloud settings.

Everything else reads it through this module: ``submit.py`` (SDK and gcloud YAML),
``build.py``, ``gcp_setup.py``, ``local_run/`` and the Makefile
(``vertex-tools get image_uri``). The pydantic models below are the file's schema;
``load()`` reads it with ``schema.py`` and rejects a malformed file with one located line
per problem. ``Config.placeholders()`` lists values that still need
your own (submitting refuses them); ``vertex-tools check`` adds ``preflight.py``: Vertex's
names and the study against the trainer. This module reads and checks; it has no command line
and prints nothing (``cli.py`` has ``check``, ``get`` and ``show``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr

from vertex_trainer_tools import gcp_names as names
from vertex_trainer_tools import schema
from vertex_trainer_tools import vertex_limits as limits
from vertex_trainer_tools.errors import ToolError
from vertex_trainer_tools.gcp_names import (
    BUCKET_RE,
    PROJECT_RE,
    REGION_RE,
)
from vertex_trainer_tools.job_config import (  # noqa: F401
    REDUCTION_SERVER_IMAGE,
    JobConfig,
    ModelConfig,
    WorkerPool,
)
from vertex_trainer_tools.schema import Model, example, pattern
from vertex_trainer_tools.study import HptConfig, Metric, Parameter  # noqa: F401 (the hpt: section)

DEFAULT_PATH = "vertex.yaml"

# Values the template writes for you to replace; a job with them would fail in the cloud.
PLACEHOLDER_PATTERNS = (
    re.compile(r"my-gcp-project"),
    re.compile(r"\b(PROJECT_ID|PROJECT_NUMBER|PROJECT|CHANGE_?ME|TODO)\b"),
    re.compile(r"<[^>]*>"),
)
MODULE_RE = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
LOCATION_IN_NAME_RE = re.compile(r"/locations/([^/]+)/")

BUCKET_URI = "a bucket URI of the form gs://BUCKET[/path]"


class ImageConfig(Model):
    registry_host: str = example("us-central1-docker.pkg.dev", min_length=1)
    repository: str = pattern(names.REPOSITORY_RE, names.REPOSITORY, "trainers")
    name: str = pattern(names.IMAGE_NAME_RE, names.IMAGE_NAME, "trainer")
    tag: str = "latest"
    base_image: str = ""  # empty: the Dockerfile's pinned ARG BASE_IMAGE default

    def settle(self):
        return {"tag": self.tag or "latest"}

    def problems(self):
        why = limits.tag_problem(self.tag)
        if why:
            yield "tag", why
        if self.base_image:
            why = limits.image_reference_problem(self.base_image)
            if why:
                yield "base_image", why


class PythonPackage(Model):
    # Empty where Google lists no prebuilt training image still available for the framework:
    # package mode then says to use the custom container (image_dates.py).
    executor_image_uri: str = example(
        "us-docker.pkg.dev/vertex-ai/training/xgboost-cpu.2-1:latest", default=""
    )
    # What `python -m` runs: a dotted module name, not a file path.
    python_module: str = pattern(
        MODULE_RE, "a module name (dotted, not a file path)", "trainer.task", "trainer.task"
    )

    def problems(self):
        why = self.executor_image_uri and limits.image_reference_problem(
            self.executor_image_uri, need_host=True
        )
        if why:
            yield "executor_image_uri", why


class Config(Model):
    project: str = pattern(PROJECT_RE, names.PROJECT_ID, "my-project-123")
    region: str = pattern(REGION_RE, "a region", "us-central1")
    staging_bucket: str = pattern(BUCKET_RE, BUCKET_URI, "gs://my-bucket")
    image: ImageConfig
    job: JobConfig
    base_output_dir: str = pattern(BUCKET_RE, BUCKET_URI, "gs://my-bucket/runs", "")
    python_package: PythonPackage | None = None
    hpt: HptConfig | None = None
    model: ModelConfig = Field(default_factory=ModelConfig)  # make upload-model
    _path: str = PrivateAttr(DEFAULT_PATH)
    _document: Any = PrivateAttr(None)

    @property
    def path(self) -> str:
        """The file this was read from (the start of each problem's line)."""
        return self._path

    @property
    def document(self) -> Any:
        """The YAML it was read from, with each key's line (``schema.line_of``); None when
        built from a dict."""
        return self._document

    def settle(self):
        staging = self.staging_bucket.rstrip("/")
        return {
            "staging_bucket": staging,
            "base_output_dir": self.base_output_dir.rstrip("/") or staging,
        }

    def problems(self):
        yield from names.problems(self)  # Google Cloud's naming rules
        yield from self._tools_labels()
        host, region = self.image.registry_host, self.region
        if region not in names.REGIONS:
            return  # preflight.py says the region is wrong; nothing is compared with it
        if host.endswith("-docker.pkg.dev") and region:
            location = host[: -len("-docker.pkg.dev")]
            if location not in ("us", "europe", "asia") and location != region:
                yield (
                    "image.registry_host",
                    (
                        f"the registry is in {location} but jobs run in {region}: "
                        f"use {region}-docker.pkg.dev (or a multi-region us/europe/asia)"
                    ),
                )
        match = LOCATION_IN_NAME_RE.search(self.job.tensorboard + "/")
        if match and region and match.group(1) != region:
            yield (
                "job.tensorboard",
                (f"is in {match.group(1)} but jobs run in region {region}: use one region"),
            )
        match = names.RESERVATION_NAME_RE.match(self.job.reservation)
        if match and not match.group("zone").startswith(region + "-"):
            yield (
                "job.reservation",
                f"is in zone {match.group('zone')} but jobs run in region {region}: "
                f"use a reservation in a zone of {region} (e.g. {region}-a)",
            )

    def _tools_labels(self):
        """The label that ``upload-model`` adds for the final metric must not be the user's."""
        if self.hpt is None:
            return
        key = limits.label_key(self.hpt.metric.id)
        if key in self.model.labels:
            yield (
                f"model.labels.{key}",
                f"is set by upload-model to the final {self.hpt.metric.id}: use another key",
            )
        if len(self.hpt.display_name) > limits.DISPLAY_NAME_LIMIT:
            yield (
                "hpt.display_name",
                f"must be at most {limits.DISPLAY_NAME_LIMIT} characters long",
            )

    # Derived values: computed here once so no other file spells them out.
    @property
    def image_repository(self) -> str:
        """``<host>/<project>/<repository>/<name>``, the image URI without its tag.

        A domain-scoped project ``example.com:my-project`` is ``example.com/my-project`` in
        Artifact Registry paths (a colon would start the tag)."""
        i = self.image
        project = self.project.replace(":", "/")
        return f"{i.registry_host}/{project}/{i.repository}/{i.name}"

    @property
    def image_uri(self) -> str:
        return f"{self.image_repository}:{self.image.tag}"

    def image_uri_with_tag(self, tag: str) -> str:
        return f"{self.image_repository}:{tag}"

    @property
    def registry_location(self) -> str:
        """Artifact Registry location of the image (``us-central1``, or ``us`` for ``us-``)."""
        host = self.image.registry_host
        return host[: -len("-docker.pkg.dev")] if host.endswith("-docker.pkg.dev") else ""

    @property
    def bucket_name(self) -> str:
        return self.staging_bucket[len("gs://") :].split("/", 1)[0]

    @property
    def chief(self) -> WorkerPool:
        return self.job.worker_pools[0]

    def get(self, key: str) -> Any:
        """A derived value (``image_uri``...) or a key (``job.worker_pools[0].machine_type``)."""
        if key in DERIVED_KEYS:
            return getattr(self, key)
        value: Any = self.as_dict()
        for part in schema.key_parts(key):
            if isinstance(value, dict) and str(part) in value:
                value = value[str(part)]
            elif isinstance(value, list | tuple) and isinstance(part, int) and part < len(value):
                value = value[part]
            else:
                raise KeyError(key)
        return value

    def as_dict(self) -> dict[str, Any]:
        data = self.model_dump()
        data["derived"] = {key: getattr(self, key) for key in DERIVED_KEYS}
        return data

    def placeholders(self, only: tuple[str, ...] = ()) -> list[str]:
        """One line per value that still holds a template placeholder (keys starting ``only``)."""
        found = []
        for key, value in _walk(self.as_dict()):
            if key.startswith("derived.") or (only and not key.startswith(only)):
                continue
            if isinstance(value, str) and any(p.search(value) for p in PLACEHOLDER_PATTERNS):
                found.append(
                    f"{self.path}: {key}: {value!r} is a placeholder: put your own value there"
                )
        return found


DERIVED_KEYS = ("image_repository", "image_uri", "registry_location", "bucket_name")


def _walk(value: Any, prefix: str = ""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, schema.join(prefix, key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _walk(item, f"{prefix}[{index}]")
    else:
        yield prefix, value


def parse(data: Any, path: str = DEFAULT_PATH) -> Config:
    """Check a loaded YAML document and build a ``Config``; raises ``ToolError``."""
    cfg = schema.read(Config, data, path)
    cfg._path = path
    return cfg


def load(path: str | Path = DEFAULT_PATH) -> Config:
    """Read, check and return the config; raises ``ToolError`` (one line per problem)."""
    path = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise ToolError(f"{path}: cannot read it ({error.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        byte = raw[error.start : error.start + 1].hex()
        raise ToolError(
            f"{path}:{line}: is not UTF-8 text (byte 0x{byte}): save it as UTF-8"
        ) from None
    document = schema.load_yaml(text, path)
    cfg = parse(document, path)
    cfg._document = document
    return cfg
