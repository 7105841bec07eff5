"""Validate the answers before anything is generated.

A bad answer stops generation with one line, ``ERROR: <field>: <why> (e.g. <valid example>)``,
and cookiecutter removes the half-made project folder. Values are injected with ``tojson`` so
quotes or backslashes in an answer stay data and are never executed.

Here: what rendering itself needs (text without control characters, a package name, the
choices) and the naming rules of Google Cloud. The rendered ``vertex.yaml`` is then checked by
the project's own loader in the post-generation hook, the same rules ``make`` applies later.
"""

import json
import keyword
import re
import sys
import unicodedata

ANSWERS = json.loads(
    r"""{
    "project_name": {{ cookiecutter.project_name | tojson }},
    "project_slug": {{ cookiecutter.project_slug | tojson }},
    "description": {{ cookiecutter.description | tojson }},
    "author_name": {{ cookiecutter.author_name | tojson }},
    "framework": {{ cookiecutter.framework | tojson }},
    "gcp_project_id": {{ cookiecutter.gcp_project_id | tojson }},
    "region": {{ cookiecutter.region | tojson }},
    "gcs_bucket": {{ cookiecutter.gcs_bucket | tojson }},
    "artifact_registry_repo": {{ cookiecutter.artifact_registry_repo | tojson }},
    "image_name": {{ cookiecutter.image_name | tojson }},
    "base_image": {{ cookiecutter.base_image | tojson }},
    "machine_type": {{ cookiecutter.machine_type | tojson }},
    "accelerator_type": {{ cookiecutter.accelerator_type | tojson }},
    "accelerator_count": {{ cookiecutter.accelerator_count | tojson }}
}"""
)

FRAMEWORKS = ("keras", "pytorch", "xgboost")
BASE_IMAGES = ("deep-learning-container", "nvidia-cuda")

# Vertex AI training locations (google-cloud-aiplatform's SUPPORTED_REGIONS, less "global").
REGIONS = frozenset(
    """
    africa-south1 asia-east1 asia-east2 asia-northeast1 asia-northeast2 asia-northeast3
    asia-south1 asia-south2 asia-southeast1 asia-southeast2 australia-southeast1
    australia-southeast2 europe-central2 europe-north1 europe-north2 europe-southwest1
    europe-west1 europe-west12 europe-west2 europe-west3 europe-west4 europe-west6 europe-west8
    europe-west9 me-central1 me-central2 me-west1 northamerica-northeast1
    northamerica-northeast2 southamerica-east1 southamerica-west1 us-central1 us-east1
    us-east4 us-east5 us-east7 us-south1 us-west1 us-west2 us-west3 us-west4 us-west8
    """.split()
)

# GPU names of the Vertex AcceleratorType enum (aiplatform_v1); NONE means CPU only.
ACCELERATORS = frozenset(
    """
    NVIDIA_TESLA_T4 NVIDIA_TESLA_V100 NVIDIA_TESLA_P100 NVIDIA_TESLA_P4 NVIDIA_TESLA_K80
    NVIDIA_TESLA_A100 NVIDIA_A100_80GB NVIDIA_L4 NVIDIA_H100_80GB NVIDIA_H100_MEGA_80GB
    NVIDIA_H200_141GB NVIDIA_B200 NVIDIA_GB200 NVIDIA_RTX_PRO_6000
    """.split()
)
NO_ACCELERATOR = ("NONE", "ACCELERATOR_TYPE_UNSPECIFIED")
ACCELERATOR_COUNTS = (1, 2, 4, 8, 16)

# Names a project package must not take: they would shadow what the trainer imports.
RESERVED_SLUGS = frozenset(
    {"trainer", "tools", "tests", "test", "setup", "keras", "tensorflow", "tf_keras", "torch"}
    | {"transformers", "datasets", "xgboost", "hypertune", "google", "yaml"}
    | set(getattr(sys, "stdlib_module_names", ()))
)


class InvalidAnswer(ValueError):
    def __init__(self, field, why, example):
        super().__init__(f"{field}: {why} (e.g. {example})")


EXAMPLES = {
    "project_name": "Sentiment Trainer",
    "project_slug": "sentiment_trainer",
    "description": "Trains a sentiment classifier",
    "author_name": "Zoë Müller",
    "framework": "keras",
    "gcp_project_id": "my-project-123",
    "region": "us-central1",
    "gcs_bucket": "gs://my-project-123-vertex",
    "artifact_registry_repo": "trainers",
    "image_name": "sentiment-trainer",
    "base_image": "deep-learning-container",
    "machine_type": "n1-standard-8",
    "accelerator_type": "NVIDIA_TESLA_T4",
    "accelerator_count": "1",
}


def check_text(field, value):
    """One line of printable text: a line break would split a Makefile or YAML line, a lone
    surrogate (undecodable terminal input) cannot be written as UTF-8."""
    for char in value:
        if unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp"):
            raise InvalidAnswer(
                field,
                f"contains the non-printable character U+{ord(char):04X}: one line of text only",
                EXAMPLES[field],
            )


def check_project_name(value):
    if not value.strip():
        raise InvalidAnswer("project_name", "must not be empty", EXAMPLES["project_name"])


# What cookiecutter.json derives from a name without a letter or digit: a folder name that can be
# created (and removed again) in any output folder, unlike an empty one.
NO_SLUG = "__no_slug__"


def check_project_slug(value, project_name=""):
    if value in ("", NO_SLUG):
        raise InvalidAnswer(
            "project_slug",
            f"no package name can be derived from project_name {project_name!r}: "
            "give project_slug yourself",
            EXAMPLES["project_slug"],
        )
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", value):
        raise InvalidAnswer(
            "project_slug",
            f"{value!r} is not a valid package name: lowercase letters, digits and _, "
            "starting with a letter",
            "sentiment_trainer",
        )
    if keyword.iskeyword(value) or value in RESERVED_SLUGS:
        raise InvalidAnswer(
            "project_slug", f"{value!r} would shadow a Python module", "sentiment_trainer"
        )


def check_framework(value):
    if value not in FRAMEWORKS:
        raise InvalidAnswer(
            "framework", f"{value!r} is not one of {', '.join(FRAMEWORKS)}", "keras"
        )


def check_gcp_project_id(value):
    # Project IDs: 6-30 characters, lowercase letters, digits and hyphens, start with a letter,
    # no trailing hyphen, and never the word "google".
    if not re.fullmatch(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", value) or "google" in value:
        raise InvalidAnswer(
            "gcp_project_id",
            f"{value!r} is not a project ID: 6-30 lowercase letters, digits or hyphens, "
            "starting with a letter, not ending with a hyphen",
            "my-project-123",
        )


def check_region(value):
    if value not in REGIONS:
        raise InvalidAnswer(
            "region", f"{value!r} is not a Vertex AI training region", "us-central1"
        )


def bucket_name(value):
    name = value.strip()
    if name.startswith("gs://"):
        name = name[len("gs://") :]
    return name.rstrip("/")


def check_gcs_bucket(value):
    name = bucket_name(value)
    example = "gs://my-project-123-vertex"
    if "/" in name:
        raise InvalidAnswer("gcs_bucket", f"{value!r} must be a bucket, not a path", example)
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]", name):
        raise InvalidAnswer(
            "gcs_bucket",
            f"{value!r} is not a bucket name: 3-63 lowercase letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit",
            example,
        )
    if any(len(part) > 63 or not part for part in name.split(".")) or (
        "." not in name and len(name) > 63
    ):
        raise InvalidAnswer("gcs_bucket", f"{value!r} is longer than 63 characters", example)
    if name.startswith("goog") or "google" in name or re.fullmatch(r"[\d.]+", name):
        raise InvalidAnswer(
            "gcs_bucket", f"{value!r} uses a reserved form ('goog', 'google' or an IP)", example
        )


def check_artifact_registry_repo(value):
    if not re.fullmatch(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?", value):
        raise InvalidAnswer(
            "artifact_registry_repo",
            f"{value!r} is not a repository name: lowercase letters, digits and hyphens, "
            "starting with a letter",
            "trainers",
        )


def check_image_name(value):
    component = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
    if not re.fullmatch(rf"{component}(?:/{component})*", value) or len(value) > 128:
        raise InvalidAnswer(
            "image_name",
            f"{value!r} is not a Docker image name: lowercase letters, digits, '.', '_', '-'",
            "sentiment-trainer",
        )


def check_base_image(value):
    if value not in BASE_IMAGES:
        raise InvalidAnswer(
            "base_image", f"{value!r} is not one of {', '.join(BASE_IMAGES)}", BASE_IMAGES[0]
        )


def check_accelerator(accelerator_type, accelerator_count):
    kind = accelerator_type.strip().upper()
    if kind not in ACCELERATORS and kind not in NO_ACCELERATOR:
        raise InvalidAnswer(
            "accelerator_type",
            f"{accelerator_type!r} is not a Vertex GPU type (or NONE)",
            "NVIDIA_TESLA_T4",
        )
    text = accelerator_count.strip()
    if not re.fullmatch(r"\d+", text):
        raise InvalidAnswer(
            "accelerator_count", f"{accelerator_count!r} is not a whole number", "1"
        )
    count = int(text)
    if kind in NO_ACCELERATOR and count != 0:
        raise InvalidAnswer(
            "accelerator_count", f"must be 0 when accelerator_type is {kind}, got {count}", "0"
        )
    if kind in ACCELERATORS and count not in ACCELERATOR_COUNTS:
        raise InvalidAnswer(
            "accelerator_count",
            f"{count} GPUs per replica is not offered; use one of {ACCELERATOR_COUNTS}",
            "1",
        )


def validate(answers):
    for field, value in answers.items():
        check_text(field, value)
    check_project_name(answers["project_name"])
    check_project_slug(answers["project_slug"], answers["project_name"])
    check_framework(answers["framework"])
    check_gcp_project_id(answers["gcp_project_id"])
    check_region(answers["region"])
    check_gcs_bucket(answers["gcs_bucket"])
    check_artifact_registry_repo(answers["artifact_registry_repo"])
    check_image_name(answers["image_name"])
    check_base_image(answers["base_image"])
    check_accelerator(answers["accelerator_type"], answers["accelerator_count"])


def main():
    try:
        validate(ANSWERS)
    except InvalidAnswer as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
