"""Check the rendered config, then keep only the chosen framework's modules.

``vertex.yaml`` is checked by the project's own loader (``tools/config.py`` with
``tools/gcp_names.py``) and Vertex's names (``tools/preflight.py``: region, accelerator), the one
place of Google Cloud's naming rules, so the answers obey the same rules as every later ``make``
target; a problem is printed as
``ERROR: <answer>: <why>`` and the hook fails, and cookiecutter removes the project folder it made.

The template keeps each framework's plain-Python modules, tests, requirements and Dockerfile
under ``variants/<framework>/``; they are copied over the project root here, so the generated
project contains one framework and no trace of the others.
"""

import json
import os
import re
import shutil
import sys

ANSWERS = json.loads(
    r"""{
    "framework": {{ cookiecutter.framework | tojson }},
    "gcp_project_id": {{ cookiecutter.gcp_project_id | tojson }},
    "region": {{ cookiecutter.region | tojson }},
    "artifact_registry_repo": {{ cookiecutter.artifact_registry_repo | tojson }},
    "image_name": {{ cookiecutter.image_name | tojson }},
    "machine_type": {{ cookiecutter.machine_type | tojson }}
}"""
)
FRAMEWORK = ANSWERS["framework"]
VARIANTS = "variants"
CONFIG = "vertex.yaml"

# Which template answer wrote each key of vertex.yaml (the primary pool is pool 0).
ANSWER_OF_KEY = {
    "project": "gcp_project_id",
    "region": "region",
    "staging_bucket": "gcs_bucket",
    "base_output_dir": "gcs_bucket",
    "image.registry_host": "region",
    "image.repository": "artifact_registry_repo",
    "image.name": "image_name",
    "job.display_name": "image_name",
    "hpt.display_name": "image_name",
    "job.worker_pools.0.machine_type": "machine_type",
    "job.worker_pools.0.accelerator_type": "accelerator_type",
    "job.worker_pools.0.accelerator_count": "accelerator_count",
    "python_package.executor_image_uri": "framework",
}
# The same by the last part of a key, for a line YAML cannot parse.
ANSWER_OF_NAME = {key.rsplit(".", 1)[-1]: answer for key, answer in ANSWER_OF_KEY.items()}


def answer_problem(problem: str, config_lines: list[str]) -> str:
    """``vertex.yaml:29: job.worker_pools[0].machine_type: why`` -> ``machine_type: why``."""
    match = re.match(rf"^{re.escape(CONFIG)}(?::(\d+))?:\s*(.*)$", problem, re.S)
    line, text = (match.group(1), match.group(2)) if match else (None, problem)
    key, separator, why = text.partition(": ")
    key = re.sub(r"\[(\d+)\]", r".\1", key)
    if separator and key in ANSWER_OF_KEY:
        return f"{ANSWER_OF_KEY[key]}: {why}"
    if line and 0 < int(line) <= len(config_lines):
        name = config_lines[int(line) - 1].strip().lstrip("- ").partition(":")[0]
        if name in ANSWER_OF_NAME:
            answer = ANSWER_OF_NAME[name]
            value = f"{ANSWERS[answer]!r} " if answer in ANSWERS else ""
            return (
                f"{answer}: {value}makes {CONFIG} invalid (line {line}: {text}): use a plain value"
            )
    return problem


def config_problems() -> list[str]:
    """The loader's problems with the rendered config, plus values YAML read differently."""
    sys.path.insert(0, os.getcwd())
    from tools.config import ConfigError, load

    with open(CONFIG, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    try:
        config = load(CONFIG)
    except ConfigError as error:
        return unique(answer_problem(problem, lines) for problem in error.problems)
    from tools.preflight import vertex_problems  # the SDK's names when installed, else a copy

    named = unique(answer_problem(f"{key}: {why}", lines) for key, why in vertex_problems(config))
    if named:
        return named
    read = {
        "gcp_project_id": config.project,
        "region": config.region,
        "artifact_registry_repo": config.image.repository,
        "image_name": config.image.name,
        "machine_type": config.job.worker_pools[0].machine_type,
    }
    return [
        f"{answer}: {CONFIG} reads {value!r} as {read[answer]!r}: use a plain value"
        for answer, value in ANSWERS.items()
        if answer in read and read[answer] != value.strip()
    ]


def unique(problems) -> list[str]:
    """One line per answer: an answer can write several keys (gcs_bucket: two bucket URIs)."""
    first = {}
    for problem in problems:
        answer = problem.partition(":")[0]
        first.setdefault(problem if answer == CONFIG else answer, problem)
    return list(first.values())


def install_variant(framework: str) -> None:
    source = os.path.join(VARIANTS, framework)
    if not os.path.isfile(os.path.join(source, "trainer", "train.py")):
        available = sorted(
            name
            for name in os.listdir(VARIANTS)
            if os.path.isfile(os.path.join(VARIANTS, name, "trainer", "train.py"))
        )
        raise SystemExit(
            f"ERROR: framework: {framework!r} is not available in this template version yet "
            f"(e.g. {', '.join(available) or 'keras'})"
        )
    for directory, _, names in os.walk(source):
        target_directory = os.path.join(".", os.path.relpath(directory, source))
        os.makedirs(target_directory, exist_ok=True)
        for name in names:
            shutil.copy2(os.path.join(directory, name), os.path.join(target_directory, name))
    shutil.rmtree(VARIANTS)


def main() -> int:
    problems = config_problems()
    for problem in problems:
        print(f"ERROR: {problem}", file=sys.stderr)
    if problems:
        return 1
    install_variant(FRAMEWORK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
