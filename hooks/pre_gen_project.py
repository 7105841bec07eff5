"""Validate the answers before anything is generated.

A bad answer stops generation with one line, ``ERROR: <field>: <why> (e.g. <valid example>)``,
and cookiecutter removes the half-made project folder. Values are injected with ``tojson`` so
quotes or backslashes in an answer stay data and are never executed.

Here: what rendering itself needs (text without control characters, a package name, the
choices, a whole accelerator count), then Google Cloud's naming rules, loaded from their one
module in the template checkout (``vertex-trainer-tools/.../gcp_names.py``, stdlib only), the
rules that ``vertex-tools check`` applies to ``vertex.yaml`` at every later ``make``.
"""

import importlib.util
import json
import keyword
import os
import re
import subprocess
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

# Where cookiecutter read the template: absolute for a cloned template, else as typed (relative
# to the directory cookiecutter was started in, which the shell keeps in PWD).
TEMPLATE_DIR = {{cookiecutter._repo_dir | default("") | tojson}}
NAMING_RULES = os.path.join("vertex-trainer-tools", "src", "vertex_trainer_tools", "gcp_names.py")
MACHINE_RULES = os.path.join(os.path.dirname(NAMING_RULES), "vertex_limits.py")

FRAMEWORKS = ("keras", "pytorch", "xgboost")
BASE_IMAGES = ("deep-learning-container", "nvidia-cuda")
NO_ACCELERATOR = ("", "NONE", "ACCELERATOR_TYPE_UNSPECIFIED")  # as cookiecutter.json's __gpu

# Names a project package must not take: they would shadow what the trainer imports.
RESERVED_SLUGS = frozenset(
    {"trainer", "tools", "tests", "test", "setup", "keras", "tensorflow", "tf_keras", "torch"}
    | {"transformers", "datasets", "xgboost", "hypertune", "google", "yaml"}
    | {"vertex_trainer_tools"}
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


def check_base_image(value):
    if value not in BASE_IMAGES:
        raise InvalidAnswer(
            "base_image", f"{value!r} is not one of {', '.join(BASE_IMAGES)}", BASE_IMAGES[0]
        )


def check_accelerator(accelerator_type, accelerator_count):
    """What cookiecutter.json's derivations need: a GPU or none (a GPU picks CUDA images, the
    Dockerfile's base and the executor image) and a whole count that agrees with the type;
    the naming rules then check the name and the count against Vertex's."""
    kind = accelerator_type.strip().upper()
    if kind.startswith("TPU"):
        raise InvalidAnswer(
            "accelerator_type",
            f"{accelerator_type!r} is a TPU: this template builds CUDA images for GPUs (or NONE)",
            "NVIDIA_TESLA_T4",
        )
    count = accelerator_count.strip()
    if not re.fullmatch(r"\d+", count):
        raise InvalidAnswer(
            "accelerator_count", f"{accelerator_count!r} is not a whole number", "1"
        )
    if int(count) == 0 and kind not in NO_ACCELERATOR:
        # A GPU type with no GPUs would bake a CPU-only project without a word.
        raise InvalidAnswer(
            "accelerator_count",
            f"0 with accelerator_type {kind}: give 1 or more, or accelerator_type NONE"
            " for a CPU-only project",
            "1",
        )


def validate(answers):
    for field, value in answers.items():
        check_text(field, value)
    check_project_name(answers["project_name"])
    check_project_slug(answers["project_slug"], answers["project_name"])
    check_framework(answers["framework"])
    check_base_image(answers["base_image"])
    check_accelerator(answers["accelerator_type"], answers["accelerator_count"])


def template_candidates(repo_dir):
    """Where the template may be: cookiecutter's ``_repo_dir`` (absolute for a cloned template,
    else as typed, relative to the shell's PWD); cruft gives hooks no ``_repo_dir``, so then the
    working directory of the process that runs this hook, which cookiecutter's ``generate_files``
    keeps in the template (cruft's clone, at the commit it generates) while hooks run."""
    if repo_dir:
        yield os.path.join(os.environ.get("PWD", ""), repo_dir)  # unchanged when absolute
    try:
        yield os.readlink(f"/proc/{os.getppid()}/cwd")  # Linux
    except OSError:
        lsof = ["lsof", "-a", "-p", str(os.getppid()), "-d", "cwd", "-Fn"]
        try:
            out = subprocess.run(lsof, capture_output=True, text=True, timeout=10).stdout
            yield from (line[1:] for line in out.splitlines() if line.startswith("n"))
        except (OSError, subprocess.SubprocessError):
            pass


def naming_rules(template_dir=TEMPLATE_DIR, rules=NAMING_RULES):
    """The template's ``gcp_names`` module (or ``rules``: another stdlib-only module of the
    package, such as ``vertex_limits``), loaded by path: the package need not be installed."""
    for base in template_candidates(template_dir):
        path = os.path.join(base, rules)
        if os.path.isfile(path):
            name = os.path.splitext(os.path.basename(path))[0]
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise FileNotFoundError(f"{rules} not found in the template {template_dir!r}")


def machine_problems(answers, template_dir=TEMPLATE_DIR):
    """Vertex's machine and accelerator table (``vertex_limits.py``): e.g. an L4 on an N1."""
    limits = naming_rules(template_dir, MACHINE_RULES)
    return limits.answer_problems(
        answers["machine_type"], answers["accelerator_type"], answers["accelerator_count"]
    )


def main():
    try:
        validate(ANSWERS)
        problems = naming_rules().answer_problems(ANSWERS)
        # One line per field: the naming rules' own line first (e.g. a count's, a pattern's).
        fields = {problem.split(":", 1)[0] for problem in problems}
        problems += [p for p in machine_problems(ANSWERS) if p.split(":", 1)[0] not in fields]
    except InvalidAnswer as error:
        problems = [str(error)]
    except FileNotFoundError as error:
        problems = [f"template: {error}: run cookiecutter from the template's folder"]
    for problem in problems:
        print(f"ERROR: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
