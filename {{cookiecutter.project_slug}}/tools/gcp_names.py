"""Google Cloud's naming rules for the values of vertex.yaml, in one place.

``tools/config.py`` applies them on every load (its patterns and ``problems``), and the
template's post-generation hook loads the rendered file, so a template answer and a later edit
of vertex.yaml obey the same rules. Vertex's region and accelerator names: ``tools/preflight.py``.
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
