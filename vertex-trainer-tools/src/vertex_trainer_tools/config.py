"""Read and check ``vertex.yaml``, the one file that holds this project's Google Cloud settings.

Everything else reads it through this module: ``submit.py`` (SDK and gcloud YAML),
``build.py``, ``gcp_setup.py``, ``local_run/`` and the Makefile
(``vertex-tools get image_uri``). The dataclasses below are the file's schema;
``load()`` reads it with ``schema.py`` (stdlib and PyYAML only) and rejects a malformed
file with one located line per problem. ``Config.placeholders()`` lists values that still need
your own (submitting refuses them); ``check`` adds ``preflight.py``: Vertex's names and
the study against the trainer.

    vertex-tools get image_uri        # one value (derived names or dotted keys)
    vertex-tools check                # exit 1 with one line per problem
    vertex-tools show                 # the checked config and derived values, as JSON
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vertex_trainer_tools import gcp_names as names
from vertex_trainer_tools import schema
from vertex_trainer_tools.gcp_names import (
    ACCELERATOR_RE,
    BUCKET_RE,
    MACHINE_RE,
    PROJECT_RE,
    REGION_RE,
)
from vertex_trainer_tools.schema import spec
from vertex_trainer_tools.study import HptConfig, Metric, Parameter  # noqa: F401 (the hpt: section)

DEFAULT_PATH = "vertex.yaml"

# Values the template writes for you to replace; a job with them would fail in the cloud.
PLACEHOLDER_PATTERNS = (
    re.compile(r"my-gcp-project"),
    re.compile(r"\b(PROJECT_ID|PROJECT_NUMBER|PROJECT|CHANGE_?ME|TODO)\b"),
    re.compile(r"<[^>]*>"),
)
ENV_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"
LOCATION_IN_NAME_RE = re.compile(r"/locations/([^/]+)/")
TENSORBOARD_RE = r"^projects/[^/]+/locations/[^/]+/tensorboards/[^/]+$"
NO_ACCELERATOR = "ACCELERATOR_TYPE_UNSPECIFIED"
STRATEGIES = ("STANDARD", "SPOT", "FLEX_START")  # aiplatform_v1 Scheduling.Strategy names
DISK_TYPES = ("pd-ssd", "pd-standard", "hyperdisk-balanced")
# Google's Reduction Server image (also europe-docker.pkg.dev/..., asia-docker.pkg.dev/...).
REDUCTION_SERVER_IMAGE = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"

ConfigError = schema.SchemaError  # ``problems``: one line per problem, each naming its key


@dataclass(frozen=True)
class ImageConfig:
    registry_host: str = spec(example="us-central1-docker.pkg.dev")
    repository: str = spec(pattern=names.REPOSITORY_RE, what=names.REPOSITORY, example="trainers")
    name: str = spec(pattern=names.IMAGE_NAME_RE, what=names.IMAGE_NAME, example="trainer")
    tag: str = "latest"
    base_image: str = ""  # empty: the Dockerfile's pinned ARG BASE_IMAGE default

    def __post_init__(self):
        object.__setattr__(self, "tag", self.tag or "latest")

    def problems(self):
        for name in ("registry_host", "repository", "name"):
            if not getattr(self, name):
                yield name, "missing: the training image cannot be named without it"


@dataclass(frozen=True)
class WorkerPool:
    """One entry of ``job.worker_pools``; pool 0 is the chief. An empty pool keeps a position."""

    machine_type: str = spec(pattern=MACHINE_RE, what="a machine type", example="n1-standard-8")
    accelerator_type: str = spec(NO_ACCELERATOR, case="upper", example="NVIDIA_TESLA_T4")
    accelerator_count: int = spec(0, minimum=0, example=1)
    replica_count: int = spec(1, minimum=1, example=1)
    boot_disk_type: str = spec("pd-ssd", choices=DISK_TYPES)
    boot_disk_size_gb: int = spec(100, minimum=10, example=100)
    image_uri: str = ""  # another image for this pool only (e.g. Reduction Server)

    def __post_init__(self):
        if self.accelerator_type in ("NONE", ""):
            object.__setattr__(self, "accelerator_type", NO_ACCELERATOR)

    @property
    def empty(self) -> bool:
        return self.replica_count == 0

    def problems(self):
        count_why = names.count_problem(self.accelerator_type, self.accelerator_count)
        if count_why:
            yield "accelerator_count", count_why
        # preflight.py checks the name against Vertex's list (`vertex-tools check`, submit).
        if not ACCELERATOR_RE.match(self.accelerator_type):
            yield (
                "accelerator_type",
                f"unknown accelerator {self.accelerator_type!r}" + (" (e.g. NVIDIA_TESLA_T4)"),
            )


def _empty_pool() -> WorkerPool:
    return WorkerPool(machine_type="", replica_count=0)


@dataclass(frozen=True)
class Scheduling:
    timeout_seconds: int = spec(86400, minimum=1, example=86400)
    # STANDARD (on demand), SPOT (preemptible, cheaper) or FLEX_START (queued for scarce GPUs).
    strategy: str = spec("", case="upper", choices=STRATEGIES, blank_ok=True, example="SPOT")
    max_wait: int | None = spec(None, duration=True, example='"3600s"')  # FLEX_START only
    spot: bool = False  # the old spelling of strategy: SPOT
    restart_job_on_worker_restart: bool = False

    def __post_init__(self):
        if not self.strategy:
            object.__setattr__(self, "strategy", "SPOT" if self.spot else "STANDARD")

    def problems(self):
        if self.spot and self.strategy != "SPOT":
            yield (
                "spot",
                (
                    f"true is the old spelling of strategy: SPOT but strategy is {self.strategy}: "
                    "keep strategy only (e.g. strategy: SPOT)"
                ),
            )
        if self.max_wait is not None and self.strategy != "FLEX_START":
            yield (
                "max_wait",
                "only strategy FLEX_START waits for capacity (e.g. strategy: FLEX_START)",
            )


@dataclass(frozen=True)
class ReductionServer:
    """Worker pool 2 running Google's Reduction Server: faster NCCL all-reduce across nodes."""

    replica_count: int = spec(minimum=1, example=2)
    machine_type: str = spec(
        "n1-highcpu-16", pattern=MACHINE_RE, what="a machine type", example="n1-highcpu-16"
    )
    image_uri: str = REDUCTION_SERVER_IMAGE

    def as_pool(self) -> WorkerPool:
        return WorkerPool(
            self.machine_type, replica_count=self.replica_count, image_uri=self.image_uri
        )


@dataclass(frozen=True)
class JobConfig:
    display_name: str = spec(example="my-trainer")
    worker_pools: tuple[WorkerPool, ...] = spec(
        empty_item=_empty_pool, example="[{machine_type: n1-standard-8}]"
    )
    args: tuple[str, ...] = ()
    env: dict[str, str] = spec(factory=dict, key_pattern=ENV_NAME_RE, example="{LOG_LEVEL: debug}")
    scheduling: Scheduling = spec(factory=Scheduling)
    reduction_server: ReductionServer | None = None
    service_account: str = ""
    network: str = ""
    tensorboard: str = ""
    experiment: str = ""
    enable_web_access: bool = False

    @property
    def all_pools(self) -> tuple[WorkerPool, ...]:
        """``worker_pools`` with the Reduction Server, if any, as pool 2: what Vertex gets."""
        if self.reduction_server is None:
            return self.worker_pools
        pools = list(self.worker_pools[:2]) + [_empty_pool()] * (2 - len(self.worker_pools))
        return (*pools, self.reduction_server.as_pool(), *self.worker_pools[3:])

    def problems(self):
        pools = self.worker_pools
        if not pools:
            yield "worker_pools", "expected a list with at least the primary pool"
        elif pools[0].empty:
            yield "worker_pools[0]", "the primary pool (the chief) cannot be empty"
        elif pools[0].replica_count != 1:
            yield (
                "worker_pools[0].replica_count",
                "must be 1 for the primary pool (e.g. 1): more replicas go to worker_pools[1]",
            )
        if self.reduction_server is not None:
            workers = pools[1] if len(pools) > 1 else _empty_pool()
            if workers.empty or not workers.accelerator_count:
                yield (
                    "reduction_server",
                    "speeds up the NCCL all-reduce of GPU workers: needs GPU workers in "
                    "worker_pools[1] (e.g. replica_count: 1, accelerator_count: 1)",
                )
            if len(pools) > 2 and not pools[2].empty:
                yield (
                    "reduction_server",
                    "pool 2 is already worker_pools[2]: use {} there or drop one",
                )
        if self.scheduling.strategy == "FLEX_START":
            yield from self._flex_start_problems()
        if self.tensorboard and self.experiment:
            yield "tensorboard", "set either tensorboard or experiment, not both"
        if self.tensorboard and not self.service_account:
            yield "service_account", "a TensorBoard instance needs a service account"
        if self.tensorboard and not re.match(TENSORBOARD_RE, self.tensorboard):
            yield "tensorboard", "expected projects/P/locations/REGION/tensorboards/ID"
        if self.experiment and not re.match(r"^[a-z0-9][a-z0-9-]{0,127}$", self.experiment):
            yield "experiment", "an experiment name uses lowercase letters, digits and '-'"
        if self.service_account and "@" not in self.service_account:
            yield (
                "service_account",
                "expected an e-mail, e.g. trainer@PROJECT.iam.gserviceaccount.com",
            )

    def _flex_start_problems(self):
        """Dynamic Workload Scheduler's requirements (Vertex docs: schedule-jobs-dws)."""
        if self.scheduling.timeout_seconds > 7 * 86400:
            yield "scheduling.timeout_seconds", "FLEX_START jobs run 7 days at most (e.g. 604800)"
        pools = [p for p in self.all_pools if not p.empty]
        if pools and not pools[0].accelerator_count:
            yield "scheduling.strategy", "FLEX_START queues for GPUs (L4, A100, H100, H200, B200)"
        shapes = {(p.machine_type, p.accelerator_type, p.accelerator_count) for p in pools}
        if len(shapes) > 1:
            yield (
                "scheduling.strategy",
                (
                    "FLEX_START needs one machine configuration for every worker pool"
                    + (" (a Reduction Server's differs)" if self.reduction_server else "")
                ),
            )


@dataclass(frozen=True)
class PythonPackage:
    executor_image_uri: str = spec(
        example="us-docker.pkg.dev/vertex-ai/training/xgboost-cpu.2-1:latest"
    )
    python_module: str = "trainer.task"


@dataclass(frozen=True)
class Config:
    path: str = spec(skip=True)
    project: str = spec(pattern=PROJECT_RE, what=names.PROJECT_ID, example="my-project-123")
    region: str = spec(pattern=REGION_RE, what="a region", example="us-central1")
    staging_bucket: str = spec(
        pattern=BUCKET_RE,
        what="a bucket URI of the form gs://BUCKET[/path]",
        example="gs://my-bucket",
    )
    image: ImageConfig
    job: JobConfig
    base_output_dir: str = spec(
        "",
        pattern=BUCKET_RE,
        what="a bucket URI of the form gs://BUCKET[/path]",
        example="gs://my-bucket/runs",
    )
    python_package: PythonPackage | None = None
    hpt: HptConfig | None = None

    def __post_init__(self):
        object.__setattr__(self, "staging_bucket", self.staging_bucket.rstrip("/"))
        base = self.base_output_dir.rstrip("/") or self.staging_bucket
        object.__setattr__(self, "base_output_dir", base)

    def problems(self):
        yield from names.problems(self)  # Google Cloud's naming rules
        host, region = self.image.registry_host, self.region
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

    # Derived values: computed here once so no other file spells them out.
    @property
    def image_repository(self) -> str:
        """``<host>/<project>/<repository>/<name>``, the image URI without its tag."""
        i = self.image
        return f"{i.registry_host}/{self.project}/{i.repository}/{i.name}"

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
        data = asdict(self)
        data.pop("path")
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
    """Check a loaded YAML document and build a ``Config``; raises ``ConfigError``."""
    return schema.read(Config, data, path, path=path)


def load(path: str | Path = DEFAULT_PATH) -> Config:
    """Read, check and return the config; raises ``ConfigError`` (one line per problem)."""
    path = str(path)
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ConfigError([f"{path}: cannot read it ({error.strerror})"]) from None
    return parse(schema.load_yaml(text, path), path)


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list | tuple):
        return json.dumps(value)
    return "" if value is None else str(value)


def load_or_report(path: str | Path = DEFAULT_PATH) -> Config | None:
    """``load`` for command-line tools: each problem becomes one ``ERROR:`` line on stderr."""
    try:
        return load(path)
    except ConfigError as error:
        for line in error.problems:
            print(f"ERROR: {line}", file=sys.stderr)
        return None


def main(argv: list[str] | None = None, prog: str = "vertex-tools") -> int:
    parser = argparse.ArgumentParser(prog=prog.rsplit(" ", 1)[0] if " " in prog else prog)
    commands = parser.add_subparsers(dest="command", required=True)
    config_flag = argparse.ArgumentParser(add_help=False)
    config_flag.add_argument("--config", default=DEFAULT_PATH, help="default: vertex.yaml")
    get = commands.add_parser("get", parents=[config_flag], help="print one value")
    get.add_argument("key", help=f"one of {', '.join(DERIVED_KEYS)} or a dotted key")
    commands.add_parser(
        "check",
        parents=[config_flag],
        help="exit 1 if anything needs fixing: placeholders, Vertex names, study vs trainer",
    )
    commands.add_parser(
        "show", parents=[config_flag], help="print the checked config with derived values as JSON"
    )
    args = parser.parse_args(argv)
    config = load_or_report(args.config)
    if config is None:
        return 1
    if args.command == "get":
        try:
            print(_format(config.get(args.key)))
        except KeyError:
            print(f"ERROR: {args.config}: no key {args.key!r}", file=sys.stderr)
            return 1
    elif args.command == "check":
        from vertex_trainer_tools import (
            preflight,  # imports the Vertex SDK when installed: only here
        )

        problems = config.placeholders() + preflight.problems(config)
        for line in problems:
            print(f"ERROR: {line}", file=sys.stderr)
        if problems:
            return 1
        print(f"{args.config}: OK")
    else:
        print(json.dumps(config.as_dict(), indent=2))
    return 0
