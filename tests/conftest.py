"""Shared fixtures: bake the template the way a user does, with an isolated cookiecutter config."""

from __future__ import annotations

import json
import os
from importlib.metadata import version
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

TEMPLATE = Path(__file__).resolve().parent.parent
CONTEXT = json.loads((TEMPLATE / "cookiecutter.json").read_text())
FRAMEWORKS = CONTEXT["framework"]
BASE_IMAGES = CONTEXT["base_image"]
PROJECT_TEMPLATE = TEMPLATE / "{{cookiecutter.project_slug}}"
# A pip constraints file for every environment the suite builds: torch must resolve to the
# local CPU build, never to a CUDA build from the index.
CONSTRAINTS = TEMPLATE / "tests" / "constraints.txt"


def bake(output_dir: Path, **answers: str) -> Path:
    """Generate a project non-interactively and return its folder."""
    project = cookiecutter(
        str(TEMPLATE),
        no_input=True,
        extra_context=answers,
        output_dir=str(output_dir),
        default_config=True,
    )
    return Path(project)


def combinations() -> list[dict[str, str]]:
    """The supported answer combinations, built from cookiecutter.json's choice lists.

    Framework and base image interact (different Dockerfiles), so they are multiplied; a
    CPU-only machine is cycled in once per framework because it changes the rendered images.
    """
    cases = []
    for framework in FRAMEWORKS:
        for base_image in BASE_IMAGES:
            cases.append({"framework": framework, "base_image": base_image})
        cases.append(
            {
                "framework": framework,
                "base_image": BASE_IMAGES[0],
                "accelerator_type": "NONE",
                "accelerator_count": "0",
                "machine_type": "n1-standard-4",
            }
        )
    return cases


def case_id(case: dict[str, str]) -> str:
    gpu = "cpu" if case.get("accelerator_type") == "NONE" else "gpu"
    return f"{case['framework']}-{case['base_image']}-{gpu}"


@pytest.fixture(scope="session")
def baked(tmp_path_factory):
    """Bake each combination once per session: ``baked(case) -> project folder``."""
    cache: dict[str, Path] = {}

    def get(case: dict[str, str]) -> Path:
        key = case_id(case)
        if key not in cache:
            cache[key] = bake(tmp_path_factory.mktemp(key), **case)
        return cache[key]

    return get


def pip_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PIP_CONSTRAINT"] = str(CONSTRAINTS)
    env.pop("VIRTUAL_ENV", None)
    return env


# Minutes each, against seconds for the rest: started first, longest first, so that the two
# xdist workers end together (the image tests are one xdist group and stay on one worker).
LONGEST_FIRST = ["images", "generated[pytorch]", "generated[keras]", "generated[xgboost]"]


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        for position, name in enumerate(LONGEST_FIRST):
            marker, _, framework = name.partition("[")
            wanted = not framework or f"[{framework}" in item.nodeid
            if item.get_closest_marker(marker) and wanted:
                return position
        return len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file's own order is kept


def pytest_configure(config):
    """pytest-xdist 3.8 keeps an ``xdist_group`` on one worker by adding ``@<group>`` to each
    test's id, which pytest 9.2 ignores: the image tests then spread over both workers and each
    builds every image again. Refuse that pair at the start rather than run twice as long."""
    if getattr(config.option, "dist", "no") != "loadgroup":
        return
    xdist = tuple(int(part) for part in version("pytest-xdist").split(".")[:2])
    if pytest.version_tuple[:2] >= (9, 2) and xdist <= (3, 8):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} with pytest-xdist {version('pytest-xdist')}: "
            "--dist loadgroup would not keep tests/test_images.py on one worker; "
            "install requirements-dev.txt (pytest<9.2)"
        )
