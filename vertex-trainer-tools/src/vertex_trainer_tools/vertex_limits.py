"""Vertex AI's own limits, in one declared table (stdlib only): what Vertex refuses at create
time, after an image was pushed, so that ``vertex-tools check`` refuses it first.

- machine types Vertex training offers, and the accelerators (and counts) each one takes;
- limits of a CustomJob: display names, worker pools, replicas;
- Docker's image reference grammar (image URIs and tags);
- Google Cloud's label rules (international letters included) and how values become text.

Sources (read 2026-11):
  https://cloud.google.com/vertex-ai/docs/training/configure-compute  (machine types, GPUs)
  https://cloud.google.com/compute/docs/gpus  (N1 GPU counts and the vCPUs each count serves)
  https://cloud.google.com/vertex-ai/docs/training/locations  (regions: gcp_names.REGIONS)
  https://cloud.google.com/vertex-ai/docs/reference/rest/v1/CustomJobSpec  (4 worker pools)
  https://cloud.google.com/vertex-ai/docs/reference/rest/v1/MachineSpec  (accelerator names)
  https://cloud.google.com/resource-manager/docs/labels-overview  (label keys and values)
  https://github.com/distribution/reference/blob/main/regexp.go  (image references, tags)

``schema``-level checks (``job_config.py``, ``config.py``) call these functions; the template's
pre-generation hook can load this file by path, as it loads ``gcp_names.py``, and call
``answer_problems``.
"""

from __future__ import annotations

import difflib
import re
import unicodedata

# --- machine types ----------------------------------------------------------------------------


def _sizes(family: str, kinds: dict[str, tuple[int, ...]]) -> list[str]:
    return [f"{family}-{kind}-{size}" for kind, sizes in kinds.items() for size in sizes]


# CPU-only families: no accelerator can be attached (configure-compute, "Compute resources").
CPU_MACHINES = frozenset(
    _sizes("e2", {"standard": (4, 8, 16, 32), "highmem": (2, 4, 8, 16), "highcpu": (16, 32)})
    + _sizes(
        "n2",
        {
            "standard": (4, 8, 16, 32, 48, 64, 80),
            "highmem": (2, 4, 8, 16, 32, 48, 64, 80),
            "highcpu": (16, 32, 48, 64, 80),
        },
    )
    + _sizes(
        "n2d",
        {
            "standard": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224),
            "highmem": (2, 4, 8, 16, 32, 48, 64, 80, 96),
            "highcpu": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224),
        },
    )
    + _sizes("c2", {"standard": (4, 8, 16, 30, 60)})
    + _sizes("c2d", dict.fromkeys(("standard", "highmem", "highcpu"), (2, 4, 8, 16, 32, 56, 112)))
    + _sizes("c3", dict.fromkeys(("standard", "highmem", "highcpu"), (4, 8, 22, 44, 88, 176)))
    + _sizes("m1", {"ultramem": (40, 80, 160), "megamem": (96,)})
)
# N1: CPU machines that take T4, P4, V100 or P100 GPUs.
N1_MACHINES = frozenset(
    _sizes(
        "n1",
        {
            "standard": (4, 8, 16, 32, 64, 96),
            "highmem": (2, 4, 8, 16, 32, 64, 96),
            "highcpu": (16, 32, 64, 96),
        },
    )
)
# N1 GPUs: count per VM -> the most vCPUs that count serves (Compute Engine's N1 GPU table;
# Vertex's configure-compute table lists the same combinations per machine type).
N1_ACCELERATORS = {
    "NVIDIA_TESLA_T4": {1: 24, 2: 48, 4: 96},
    "NVIDIA_TESLA_P4": {1: 24, 2: 48, 4: 96},
    "NVIDIA_TESLA_V100": {1: 12, 2: 24, 4: 48, 8: 96},
    "NVIDIA_TESLA_P100": {1: 16, 2: 32, 4: 64},
}
# Accelerator-optimized machines: the accelerator and count each one comes with (fixed).
FIXED_ACCELERATORS: dict[str, tuple[str, int]] = {
    "a2-highgpu-1g": ("NVIDIA_TESLA_A100", 1),
    "a2-highgpu-2g": ("NVIDIA_TESLA_A100", 2),
    "a2-highgpu-4g": ("NVIDIA_TESLA_A100", 4),
    "a2-highgpu-8g": ("NVIDIA_TESLA_A100", 8),
    "a2-megagpu-16g": ("NVIDIA_TESLA_A100", 16),
    "a2-ultragpu-1g": ("NVIDIA_A100_80GB", 1),
    "a2-ultragpu-2g": ("NVIDIA_A100_80GB", 2),
    "a2-ultragpu-4g": ("NVIDIA_A100_80GB", 4),
    "a2-ultragpu-8g": ("NVIDIA_A100_80GB", 8),
    "a3-highgpu-1g": ("NVIDIA_H100_80GB", 1),
    "a3-highgpu-2g": ("NVIDIA_H100_80GB", 2),
    "a3-highgpu-4g": ("NVIDIA_H100_80GB", 4),
    "a3-highgpu-8g": ("NVIDIA_H100_80GB", 8),
    "a3-megagpu-8g": ("NVIDIA_H100_MEGA_80GB", 8),
    "a3-ultragpu-8g": ("NVIDIA_H200_141GB", 8),
    "a4-highgpu-8g": ("NVIDIA_B200", 8),
    "a4x-highgpu-4g": ("NVIDIA_GB200", 4),
    "g2-standard-4": ("NVIDIA_L4", 1),
    "g2-standard-8": ("NVIDIA_L4", 1),
    "g2-standard-12": ("NVIDIA_L4", 1),
    "g2-standard-16": ("NVIDIA_L4", 1),
    "g2-standard-24": ("NVIDIA_L4", 2),
    "g2-standard-32": ("NVIDIA_L4", 1),
    "g2-standard-48": ("NVIDIA_L4", 4),
    "g2-standard-96": ("NVIDIA_L4", 8),
    "cloud-tpu": ("TPU_V3", 8),  # also TPU_V2 8 (TPU_MACHINES)
    "ct5lp-hightpu-1t": ("TPU_V5_LITEPOD", 1),
    "ct5lp-hightpu-4t": ("TPU_V5_LITEPOD", 4),
    "ct5lp-hightpu-8t": ("TPU_V5_LITEPOD", 8),
}
OTHER_CHOICES = {"cloud-tpu": {("TPU_V2", 8)}}  # machines with more than one fixed choice
MACHINE_TYPES = frozenset(CPU_MACHINES | N1_MACHINES | set(FIXED_ACCELERATORS))
NO_ACCELERATOR = "ACCELERATOR_TYPE_UNSPECIFIED"
RETIRED_ACCELERATORS = {
    "NVIDIA_TESLA_K80": "reached end of support (cloud.google.com/compute/docs/eol/k80-eol)"
}

# --- CustomJob limits -------------------------------------------------------------------------

DISPLAY_NAME_LIMIT = 128  # UTF-8 characters, every Vertex resource's display name
MAX_WORKER_POOLS = 4  # chief, workers, parameter servers (or Reduction Server), evaluators
# Vertex documents no per-pool maximum; a region's default training quotas (CPUs, GPUs per
# region) are far below this, so more replicas than this is a slip of the keyboard.
MAX_REPLICAS = 1000

# --- image references (Docker distribution's grammar) -----------------------------------------

_ALNUM = r"[a-z0-9]+"
_PATH_PART = _ALNUM + r"(?:(?:[._]|__|-+)" + _ALNUM + r")*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = _DOMAIN_PART + r"(?:\." + _DOMAIN_PART + r")*(?::[0-9]+)?"
TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$", re.ASCII)
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE_RE = re.compile(
    rf"^(?P<name>(?:{_DOMAIN}/)?{_PATH_PART}(?:/{_PATH_PART})*)"
    rf"(?::(?P<tag>[\w][\w.-]{{0,127}}))?(?:@(?P<digest>{_DIGEST}))?$",
    re.ASCII,
)
IMAGE_NAME_LIMIT = 255  # the repository name, host included
TAG = "a Docker tag: 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
IMAGE_EXAMPLE = "us-central1-docker.pkg.dev/my-project-123/trainers/trainer:latest"

# --- labels -----------------------------------------------------------------------------------

MAX_LABELS = 64
LABEL_LIMIT = 63  # characters, keys and values
LABEL_BYTES = 128  # UTF-8 bytes, keys and values
LABEL_KEY = (
    "a label key: 1-63 lowercase letters (any script), digits, '_' or '-', starting with a letter"
)
LABEL_VALUE = "a label value: at most 63 lowercase letters (any script), digits, '_' or '-'"


def _close(value: str, known, n: int = 3) -> str:
    matches = difflib.get_close_matches(value, sorted(known), n=n, cutoff=0.6)
    return " (did you mean " + " or ".join(map(repr, matches)) + "?)" if matches else ""


def _vcpus(machine_type: str) -> int:
    return int(machine_type.rsplit("-", 1)[1])


def _short(accelerator: str) -> str:
    return accelerator.removeprefix("NVIDIA_").removeprefix("TESLA_")


def machines_for(accelerator: str) -> str:
    """Where ``accelerator`` runs, in words: N1 machines, or the first machine of each count."""
    if accelerator in N1_ACCELERATORS:
        return "N1 machines (e.g. n1-standard-8)"
    shapes = [*FIXED_ACCELERATORS.items()] + [
        (machine, shape) for machine, shapes in OTHER_CHOICES.items() for shape in shapes
    ]
    first: dict[int, str] = {}
    for machine, (name, count) in shapes:
        if name == accelerator:
            first.setdefault(count, machine)
    return (
        ", ".join(f"{machine} ({count})" for count, machine in sorted(first.items()))
        or "no machine of vertex_limits.py"
    )


def machine_type_problem(machine_type: str) -> str | None:
    """Why ``machine_type`` is not one Vertex training offers, with the nearest names."""
    if machine_type in MACHINE_TYPES:
        return None
    hint = _close(machine_type, MACHINE_TYPES) or " (e.g. n1-standard-8)"
    return f"{machine_type!r} is not a Vertex AI training machine type{hint}"


def machine_problems(machine_type: str, accelerator: str, count: int) -> list[tuple[str, str]]:
    """``(field, why)`` for a machine, accelerator and count that Vertex would refuse together;
    ``field`` is ``machine_type``, ``accelerator_type`` or ``accelerator_count``. An accelerator
    name this table does not know is left to the check of Vertex's names."""
    why = machine_type_problem(machine_type)
    if why:
        return [("machine_type", why)]
    if accelerator in RETIRED_ACCELERATORS:
        return [("accelerator_type", f"{accelerator} {RETIRED_ACCELERATORS[accelerator]}")]
    known = set(N1_ACCELERATORS) | {name for name, _ in FIXED_ACCELERATORS.values()}
    with_gpu = accelerator != NO_ACCELERATOR and count > 0
    if with_gpu and accelerator not in known | {"TPU_V2"}:
        return []
    if machine_type in FIXED_ACCELERATORS:
        name, fixed = FIXED_ACCELERATORS[machine_type]
        choices = {(name, fixed), *OTHER_CHOICES.get(machine_type, ())}
        comes = f"{machine_type} comes with {fixed} {name}"
        if not with_gpu:
            return [
                (
                    "accelerator_type",
                    f"{comes}: set accelerator_type: {name} and accelerator_count: {fixed}",
                )
            ]
        if accelerator not in {n for n, _ in choices}:
            return [
                (
                    "accelerator_type",
                    f"{comes}, not {accelerator} ({accelerator} runs on "
                    f"{machines_for(accelerator)})",
                )
            ]
        if (accelerator, count) not in choices:
            other = [m for m, shape in FIXED_ACCELERATORS.items() if shape == (accelerator, count)]
            hint = f" (for {count}: {other[0]})" if other else ""
            why = f"{machine_type} comes with {fixed} {accelerator}, not {count}{hint}"
            return [("accelerator_count", why)]
        return []
    if not with_gpu:
        return []
    if machine_type in CPU_MACHINES:
        return [
            (
                "accelerator_type",
                f"{machine_type} takes no accelerators: {accelerator} runs on "
                f"{machines_for(accelerator)}, or set accelerator_type: NONE",
            )
        ]
    # N1
    if accelerator not in N1_ACCELERATORS:
        return [
            (
                "accelerator_type",
                f"N1 machines take T4, P4, V100 or P100 GPUs, not {accelerator}: it runs on "
                f"{machines_for(accelerator)}",
            )
        ]
    limits = N1_ACCELERATORS[accelerator]
    offered = ", ".join(map(str, limits))
    if count not in limits:
        return [
            (
                "accelerator_count",
                f"{count} {accelerator} per N1 machine are not offered: use {offered}",
            )
        ]
    vcpus = _vcpus(machine_type)
    if vcpus > limits[count]:
        enough = [str(c) for c, most in limits.items() if most >= vcpus]
        use = (
            f"use {' or '.join(enough)}, or a smaller machine"
            if enough
            else "use a smaller machine"
        )
        return [
            (
                "accelerator_count",
                f"{machine_type} has {vcpus} vCPUs and {count} {_short(accelerator)} allow at "
                f"most {limits[count]}: {use}",
            )
        ]
    return []


def replica_problem(count: int) -> str:
    return (
        f"{count} replicas: more than {MAX_REPLICAS} would exceed any region's training quota "
        "(e.g. 4)"
    )


def answer_problems(machine_type: str, accelerator: str, count: int | str) -> list[str]:
    """``field: why`` lines for the template's answers (for the pre-generation hook, which loads
    this file by its path): the accelerator as answered (``NONE`` or a Vertex name, any case),
    the count as an integer or its digits (anything else: only the machine type is checked)."""
    machine_type, accelerator = machine_type.strip(), accelerator.strip().upper()
    if accelerator in ("", "NONE"):
        accelerator = NO_ACCELERATOR
    text = str(count).strip()
    if not text.isdigit():
        why = machine_type_problem(machine_type)
        return [f"machine_type: {why}"] if why else []
    found = machine_problems(machine_type, accelerator, int(text))
    return [f"{field}: {why}" for field, why in found]


# --- image references -------------------------------------------------------------------------


def tag_problem(tag: str) -> str | None:
    if TAG_RE.match(tag):
        return None
    return f"{tag!r} is not {TAG} (e.g. latest)"


def image_reference_problem(uri: str, need_host: bool = False) -> str | None:
    """Why ``uri`` is not an image reference ``[HOST[:PORT]/]PATH[:TAG][@DIGEST]`` that Docker
    and Vertex accept; ``need_host``: Vertex pulls it from a registry named by its host."""
    match = IMAGE_REFERENCE_RE.match(uri)
    if match is None:
        name, _, tag = uri.rpartition(":")
        if "/" not in tag and "@" not in uri and name and IMAGE_REFERENCE_RE.match(name):
            return f"{uri!r}: tag {tag!r} is not {TAG} (e.g. {IMAGE_EXAMPLE})"
        return (
            f"{uri!r} is not an image reference: HOST/PATH[:TAG] in lowercase letters, digits, "
            f"'.', '_', '-' and '/' (e.g. {IMAGE_EXAMPLE})"
        )
    if len(match.group("name")) > IMAGE_NAME_LIMIT:
        return f"{uri!r}: the image name has more than {IMAGE_NAME_LIMIT} characters"
    first = match.group("name").split("/", 1)[0]
    has_host = "/" in match.group("name") and ("." in first or ":" in first or first == "localhost")
    if need_host and not has_host:
        return f"{uri!r} names no registry host: give the full URI (e.g. {IMAGE_EXAMPLE})"
    return None


# --- labels -----------------------------------------------------------------------------------


def _label_char(char: str) -> bool:
    """A lowercase letter of any script (``Ll``; ``Lo``: scripts without case), a digit
    (``N*``), '_' or '-': Google Cloud's ``[\\p{Ll}\\p{Lo}\\p{N}_-]``."""
    category = unicodedata.category(char)
    return category in ("Ll", "Lo") or category.startswith("N") or char in "_-"


def label_key_problem(key: str) -> str | None:
    first = unicodedata.category(key[:1]) if key else ""
    if (
        first in ("Ll", "Lo")
        and len(key) <= LABEL_LIMIT
        and len(key.encode()) <= LABEL_BYTES
        and all(map(_label_char, key))
    ):
        return None
    return f"{key!r} is not {LABEL_KEY} (e.g. cost-center)"


def label_value_problem(value: str) -> str | None:
    if (
        len(value) <= LABEL_LIMIT
        and len(value.encode()) <= LABEL_BYTES
        and all(map(_label_char, value))
    ):
        return None
    return f"{value!r} is not {LABEL_VALUE} (e.g. team-nlp)"


def label_problems(labels: dict[str, str]):
    """``(key, why)`` for labels that break Google Cloud's rules (key ``labels.<name>``)."""
    if len(labels) > MAX_LABELS:
        yield "labels", f"{len(labels)} labels: Google Cloud allows {MAX_LABELS} at most"
    for key, value in labels.items():
        why = label_key_problem(key) or label_value_problem(value)
        if why:
            yield f"labels.{key}", why


def as_text(value: object) -> str:
    """A label or environment value as the user wrote it: ``1`` -> "1", ``1.0`` -> "1.0",
    ``true`` -> "true", nothing -> ""; a list or mapping is refused (ValueError)."""
    if isinstance(value, dict | list | tuple | set):
        kind = "a mapping" if isinstance(value, dict) else "a list"
        raise ValueError(f"expected one value (text, a number or true/false), got {kind}")
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def label_text(value: object) -> str:
    """A label value made from any value: lowercase, ``[a-z0-9_-]``, at most 63 characters;
    0.8125 -> ``0_8125`` (the model labels that ``upload-model`` adds)."""
    text = f"{value:.6g}" if isinstance(value, float) else str(value)
    return re.sub(r"[^a-z0-9_-]", "_", text.lower())[:LABEL_LIMIT]


def label_key(text: str) -> str:
    key = label_text(text)
    return key if key[:1].isalpha() else f"m_{key}"[:LABEL_LIMIT]
