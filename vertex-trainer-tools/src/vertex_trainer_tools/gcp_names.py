"""Google Cloud's naming rules for the values of vertex.yaml, in one place (stdlib only).

``config.py`` applies them on every load (its patterns and ``problems``), ``preflight.py``
holds Vertex's names against the SDK's when it is installed, and the template's pre-generation
hook loads this file from the template checkout to check the answers (``answer_problems``), so
a template answer and a later edit of vertex.yaml obey the same rules.
"""

from __future__ import annotations

import re

PROJECT_ID = "a project ID: 6-30 lowercase letters, digits or hyphens, starting with a letter"
REPOSITORY_RE = r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"  # Artifact Registry
REPOSITORY = "a repository name: lowercase letters, digits and hyphens, starting with a letter"
_IMAGE_PART = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
IMAGE_NAME_RE = r"^(?=.{1,128}$)" + _IMAGE_PART + "(?:/" + _IMAGE_PART + ")*$"
IMAGE_NAME = "a Docker image name: lowercase letters, digits, '.', '_', '-' and '/'"
ACCELERATOR_COUNTS = (1, 2, 4, 8, 16)  # accelerators per replica that Vertex offers
BUCKET_EXAMPLE = " (e.g. gs://my-project-123-vertex)"
# Copies of google-cloud-aiplatform 2.7.0's AcceleratorType names and SUPPORTED_REGIONS (less
# "global", where no training job runs), for when the SDK is not installed (tests/test_config.py
# holds them equal to the SDK's).
ACCELERATOR_TYPES = (
    "ACCELERATOR_TYPE_UNSPECIFIED",
    "NVIDIA_TESLA_K80",
    "NVIDIA_TESLA_P100",
    "NVIDIA_TESLA_V100",
    "NVIDIA_TESLA_P4",
    "NVIDIA_TESLA_T4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_L4",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
    "NVIDIA_GB200",
    "NVIDIA_RTX_PRO_6000",
    "TPU_V2",
    "TPU_V3",
    "TPU_V4_POD",
    "TPU_V5_LITEPOD",
)
REGIONS = (
    "africa-south1",
    "asia-east1",
    "asia-east2",
    "asia-northeast1",
    "asia-northeast2",
    "asia-northeast3",
    "asia-south1",
    "asia-south2",
    "asia-southeast1",
    "asia-southeast2",
    "australia-southeast1",
    "australia-southeast2",
    "europe-central2",
    "europe-north1",
    "europe-north2",
    "europe-southwest1",
    "europe-west1",
    "europe-west12",
    "europe-west2",
    "europe-west3",
    "europe-west4",
    "europe-west6",
    "europe-west8",
    "europe-west9",
    "me-central1",
    "me-central2",
    "me-west1",
    "northamerica-northeast1",
    "northamerica-northeast2",
    "southamerica-east1",
    "southamerica-west1",
    "us-central1",
    "us-east1",
    "us-east4",
    "us-east5",
    "us-east7",
    "us-south1",
    "us-west1",
    "us-west2",
    "us-west3",
    "us-west4",
    "us-west8",
)
REGION_RE = r"^[a-z]+-[a-z]+[0-9]+$"
PROJECT_RE = r"^([a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$"  # domain:id too
BUCKET_RE = r"^gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/.*)?$"
MACHINE_RE = r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$"
ACCELERATOR_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")
# CustomJobSpec.network: a VPC named by the project's number, not its ID.
NETWORK_RE = r"^projects/[0-9]+/global/networks/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
NETWORK = "a VPC network name: projects/PROJECT_NUMBER/global/networks/NAME"
NETWORK_EXAMPLE = "projects/123456789012/global/networks/my-vpc"
PERSISTENT_RESOURCE_RE = r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"
PERSISTENT_RESOURCE = "a persistent resource ID: lowercase letters, digits and '-' (1-63)"
# A Compute Engine reservation consumed by a job: any, none, or one by its full name.
RESERVATION_NAME_RE = re.compile(
    r"^projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/zones/(?P<zone>[a-z]+-[a-z]+[0-9]+-[a-z])"
    r"/reservations/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
)
RESERVATION_RE = r"^(any|none)$|" + RESERVATION_NAME_RE.pattern
RESERVATION = "any, none or a reservation name: projects/PROJECT/zones/ZONE/reservations/NAME"
RESERVATION_EXAMPLE = "projects/my-project-123/zones/us-central1-a/reservations/my-h100s"
# Dynamic Workload Scheduler (strategy FLEX_START) offers these GPUs only: L4, A100, H100,
# H200 and B200 (Vertex docs, schedule-jobs-dws).
FLEX_START_ACCELERATORS = (
    "NVIDIA_L4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
)
# Labels: vertex_limits.py (Google Cloud's label rules, international letters included).


def bucket_problem(uri: str) -> str | None:
    """Cloud Storage's rules for the bucket of ``gs://BUCKET[/path]`` that a pattern misses."""
    if not uri.startswith("gs://"):
        return None  # the field's pattern reports it
    name = uri[len("gs://") :].split("/", 1)[0]
    if any(not part or len(part) > 63 for part in name.split(".")):
        return f"bucket {name!r}: each dot-separated part has 1-63 characters{BUCKET_EXAMPLE}"
    if name.startswith("goog") or "google" in name or re.fullmatch(r"[\d.]+", name):
        return f"bucket {name!r} uses a reserved form ('goog', 'google' or an IP){BUCKET_EXAMPLE}"
    return None


def count_problem(accelerator_type: str, count: int) -> str | None:
    """Vertex offers 1, 2, 4, 8 or 16 accelerators per replica, and none without a type."""
    if accelerator_type == "ACCELERATOR_TYPE_UNSPECIFIED":
        return None if count == 0 else f"{count} without an accelerator_type: make it 0 (e.g. 0)"
    if count < 1:
        return f"must be >= 1 with {accelerator_type} (e.g. 1)"
    if count not in ACCELERATOR_COUNTS:
        offered = ", ".join(map(str, ACCELERATOR_COUNTS))
        return f"{count} accelerators per replica are not offered: use {offered} (e.g. 1)"
    return None


def problems(cfg):
    """``(key, why)`` for the names of a ``Config`` that the patterns of its fields miss."""
    if "google" in cfg.project:
        yield (
            "project",
            f"{cfg.project!r} is not a project ID: no 'google' in it (e.g. my-project-123)",
        )
    staging = bucket_problem(cfg.staging_bucket)
    if staging:
        yield "staging_bucket", staging
    output = bucket_problem(cfg.base_output_dir)
    if output and output != staging:  # the default output dir is in the staging bucket
        yield "base_output_dir", output


def _close(value: str, known) -> str:
    """`` (did you mean 'a' or 'b'?)`` or nothing."""
    import difflib

    matches = difflib.get_close_matches(value, sorted(known), n=3)
    return " (did you mean " + " or ".join(map(repr, matches)) + "?)" if matches else ""


def answer_problems(answers: dict[str, str]) -> list[str]:
    """``field: why (e.g. valid)`` for template answers that break a rule (pre-generation hook).

    ``answers`` are the raw cookiecutter answers; the bucket may be given with or without
    ``gs://``, the accelerator as ``NONE`` or a Vertex name with a count.
    """
    found = []

    def rule(field: str, value: str, pattern: str, what: str, example: str) -> None:
        if not value:
            found.append(f"{field}: must not be empty (e.g. {example})")
        elif not re.match(pattern, value):
            found.append(f"{field}: {value!r} is not {what} (e.g. {example})")

    project = answers["gcp_project_id"].strip()
    rule("gcp_project_id", project, PROJECT_RE, PROJECT_ID, "my-project-123")
    if "google" in project:
        found.append(
            f"gcp_project_id: {project!r} is not a project ID: no 'google' in it"
            " (e.g. my-project-123)"
        )
    project_refused = bool(found)
    region = answers["region"].strip()
    if not region:
        found.append("region: must not be empty (e.g. us-central1)")
    elif not re.match(REGION_RE, region):
        found.append(f"region: {region!r} is not a region (e.g. us-central1)")
    elif region not in REGIONS:
        found.append(
            f"region: {region!r} is not a Vertex AI training region"
            + (_close(region, REGIONS) or " (e.g. us-central1)")
        )
    bucket = "gs://" + answers["gcs_bucket"].strip().removeprefix("gs://").strip("/")
    bucket_uri = "a bucket URI of the form gs://BUCKET[/path]"
    # As cookiecutter.json has it: a domain-scoped project's bucket is named after its own part.
    default_bucket = f"gs://{answers['gcp_project_id'].split(':')[-1]}-vertex"
    if project_refused and answers["gcs_bucket"].strip() == default_bucket.strip():
        pass  # the default bucket, named after the refused project: one line is enough
    elif not answers["gcs_bucket"].strip():
        found.append("gcs_bucket: must not be empty (e.g. gs://my-bucket)")
    elif answers["gcs_bucket"].strip().startswith("gs://"):
        rule("gcs_bucket", bucket, BUCKET_RE, bucket_uri, "gs://my-bucket")
    elif not re.match(BUCKET_RE, bucket):
        found.append(f"gcs_bucket: {answers['gcs_bucket']!r} is not a bucket name (e.g. my-bucket)")
    why = bucket_problem(bucket) if re.match(BUCKET_RE, bucket) else None
    if why:
        found.append(f"gcs_bucket: {why}")
    rule(
        "artifact_registry_repo",
        answers["artifact_registry_repo"].strip(),
        REPOSITORY_RE,
        REPOSITORY,
        "trainers",
    )
    rule("image_name", answers["image_name"].strip(), IMAGE_NAME_RE, IMAGE_NAME, "trainer")
    machine = answers["machine_type"].strip()
    rule("machine_type", machine, MACHINE_RE, "a machine type", "n1-standard-8")
    accelerator = answers["accelerator_type"].strip().upper()
    count = answers["accelerator_count"].strip()
    if accelerator in ("", "NONE", "ACCELERATOR_TYPE_UNSPECIFIED"):
        why = count_problem("ACCELERATOR_TYPE_UNSPECIFIED", int(count)) if count.isdigit() else None
        return found + ([f"accelerator_count: {why}"] if why else [])
    if count in ("0", "0.0"):
        return found
    if accelerator not in ACCELERATOR_TYPES:
        found.append(
            f"accelerator_type: unknown accelerator {accelerator!r}"
            + (_close(accelerator, ACCELERATOR_TYPES) or " (e.g. NVIDIA_L4)")
        )
    elif count.isdigit():
        why = count_problem(accelerator, int(count))
        if why:
            found.append(f"accelerator_count: {why}")
    return found
