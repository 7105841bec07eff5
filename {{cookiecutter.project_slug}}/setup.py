{#- A Python string literal, quoted the way ruff format writes it. Not tojson: JSON's
    ASCII-only escapes spell an emoji as two surrogates, which Python reads as two lone surrogates
    that cannot be written to PKG-INFO. The pre-generation hook rejects control characters. -#}
{%- macro python_string(text) -%}
{%- set quote = "'" if text.count('"') > text.count("'") else '"' -%}
{{ quote }}{{ text.replace('\\', '\\\\').replace(quote, '\\' ~ quote) }}{{ quote }}
{%- endmacro -%}
"""Installable trainer package: ``pip install .`` in the image, or an sdist for Vertex's
prebuilt training containers (python_package_spec), built by ``make submit PACKAGE=1``."""

import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
# The framework comes with the environment: Vertex's prebuilt executor image in python-package
# mode (built for its CUDA and NCCL), the Dockerfile's base, or requirements.txt locally. The
# package never asks for it, nor for an extra that pulls it in (transformers[torch]): pip would
# replace the prebuilt torch 2.4 with PyPI's newest CUDA 13 build. XGBoost comes as two
# packages that share one module folder: `xgboost-cpu` (requirements.txt, local and CPU images)
# and `xgboost` (CUDA images and the prebuilt container); the package must add neither.
PROVIDED_BY_ENVIRONMENT = ("torch", "tensorflow", "xgboost", "xgboost-cpu")
# The trainer's runtime (requirements.txt pins it) reaches Vertex beside the trainer, not through
# the index: `make submit PACKAGE=1` sends its sdist with the trainer's and the image installs it
# from a wheel, so an unreleased version, on no index, never stops pip.
SENT_BESIDE = ("vertex-trainer-runtime",)
# Caps for the prebuilt executor images (Python 3.10, PyTorch 2.4): newer releases need a newer
# framework than the image has (transformers 5.15+ asks torch >= 2.6).
EXECUTOR_CAPS = {"transformers": 'transformers<5.15; python_version < "3.11"'}


def requirements() -> list[str]:
    lines = (HERE / "requirements.txt").read_text().splitlines()
    wanted = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    result = []
    for line in wanted:
        name = package_name(line)
        if name in PROVIDED_BY_ENVIRONMENT or name in SENT_BESIDE:
            continue
        result.append(re.sub(r"\[[^\]]*\]", without_framework_extras, line, count=1))
        if name in EXECUTOR_CAPS:
            result.append(EXECUTOR_CAPS[name])
    return result


def without_framework_extras(match: re.Match) -> str:
    extras = [e.strip() for e in match.group(0)[1:-1].split(",")]
    kept = [e for e in extras if e not in PROVIDED_BY_ENVIRONMENT]
    return f"[{','.join(kept)}]" if kept else ""


def package_name(requirement: str) -> str:
    return re.split(r"[\s<>=~!;\[]", requirement, maxsplit=1)[0].lower()


setup(
    name="{{ cookiecutter.project_slug }}",
    version="0.1.0",
    description={{ python_string(cookiecutter.description) }},
    author={{ python_string(cookiecutter.author_name) }},
    packages=find_packages(include=["trainer", "trainer.*"]),
    install_requires=requirements(),
    python_requires=">=3.10",
)
