{#- A Python string literal, quoted the way ruff format writes it. Not tojson: JSON's
    ASCII-only escapes spell an emoji as two surrogates, which Python reads as two lone surrogates
    that cannot be written to PKG-INFO. The pre-generation hook rejects control characters. -#}
{%- macro python_string(text) -%}
{%- set quote = "'" if text.count('"') > text.count("'") else '"' -%}
{{ quote }}{{ text.replace('\\', '\\\\').replace(quote, '\\' ~ quote) }}{{ quote }}
{%- endmacro -%}
"""Installable trainer package: ``pip install .`` in the image, or an sdist for Vertex's
prebuilt training containers (``python setup.py sdist``; python_package_spec)."""

import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
# XGBoost comes as two packages that share one module folder: `xgboost-cpu` (requirements.txt,
# installed locally and in CPU images) and `xgboost` (CUDA images, and Vertex's prebuilt
# container in python-package mode). The environment provides one; the package must not add
# the other next to it.
PROVIDED_BY_ENVIRONMENT = ("xgboost", "xgboost-cpu")


def requirements() -> list[str]:
    lines = (HERE / "requirements.txt").read_text().splitlines()
    wanted = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    return [line for line in wanted if package_name(line) not in PROVIDED_BY_ENVIRONMENT]


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
