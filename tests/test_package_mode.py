"""Python-package mode keeps the prebuilt executor image's framework.

Vertex pip-installs the project's sdist into ``python_package.executor_image_uri``, a prebuilt
image with the framework already installed (Python 3.10; PyTorch 2.4, TensorFlow 2.17 or
XGBoost 2.1). pip keeps an installed package only while every requirement on it is satisfied:
one requirement asking for a newer framework (PyPI's newest transformers' ``[torch]`` extra
asks torch >= 2.6) and pip replaces the image's torch with PyPI's newest CUDA 13 build. So
pip's own resolver plans the package's ``install_requires`` for Python 3.10 on Linux
(``--dry-run --report``, binary wheels only, no 3.10 interpreter needed), and every planned
requirement on the framework must accept the executor's version.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from vertex_trainer_tools import submit as submit_lib

from conftest import bake

# Per framework: the newest executor images Google listed, and what they ship. All are past
# their end of availability (image_dates.csv), so a new project names none; a user who names
# one (or a later one of the same framework version) still needs this.
EXECUTORS = {
    "pytorch": {"image": "pytorch-xla.2-4.py310 / pytorch-gpu.2-4.py310", "torch": "2.4.1"},
    "keras": {"image": "tf-cpu.2-17.py310 / tf-gpu.2-17.py310", "tensorflow": "2.17.1"},
    "xgboost": {"image": "xgboost-cpu.2-1", "xgboost": "2.1.4"},
}
# glibc 2.35 (the executor images run Ubuntu 22.04): every manylinux tag up to it.
PLATFORMS = ["manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64"] + [
    f"manylinux_2_{minor}_x86_64" for minor in range(5, 36)
]
# Published as an sdist only, which --only-binary cannot plan; it has no dependencies.
SDIST_ONLY = {"cloudml-hypertune"}
# Sent beside the trainer's sdist in package_uris (make submit PACKAGE=1), never from the index.
SENT_BESIDE = {"vertex-trainer-runtime"}
MARKER_ENV = {"python_version": "3.10", "python_full_version": "3.10.12", "extra": ""}


def install_requires(project: Path) -> list[str]:
    """setup.py's install_requires, read by running it with setup() captured."""
    script = (
        "import json, setuptools, sys\n"
        "setuptools.setup = lambda **kw: print(json.dumps(kw['install_requires']))\n"
        "sys.argv = ['setup.py']\n"
        "exec(compile(open('setup.py').read(), 'setup.py', 'exec'), {'__file__': 'setup.py'})\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=project, capture_output=True, text=True, check=True
    )
    return json.loads(run.stdout)


def plan(requirements: list[str], target: Path) -> list[dict]:
    """What pip would install for Python 3.10 on x86-64 Linux (PyPI's metadata only)."""
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed"]
    command += ["--python-version=3.10", "--implementation=cp", "--only-binary=:all:"]
    command += [f"--platform={platform}" for platform in PLATFORMS]
    command += [f"--target={target}", f"--report={target.parent / 'report.json'}", *requirements]
    run = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if run.returncode != 0 and "NewConnectionError" in run.stderr + run.stdout:
        pytest.skip("the package index cannot be reached")
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads((target.parent / "report.json").read_text())["install"]


def framework_requirements(planned: list[dict], roots: list[str], framework: str):
    """(who, requirement) for every requirement on the framework that applies on 3.10, with
    the extras that were asked for (``transformers[torch]`` counts its torch extra)."""
    found = []
    sources = [("setup.py", roots, [""])] + [
        (
            item["metadata"]["name"],
            item["metadata"].get("requires_dist", []),
            ["", *item.get("requested_extras", [])],
        )
        for item in planned
    ]
    for who, lines, extras in sources:
        for line in lines:
            requirement = Requirement(line)
            if canonicalize_name(requirement.name) != framework:
                continue
            marker = requirement.marker
            if marker is None or any(marker.evaluate({**MARKER_ENV, "extra": e}) for e in extras):
                found.append((who, requirement))
    return found


@pytest.mark.parametrize("framework", list(EXECUTORS))
def test_package_keeps_the_executor_framework(tmp_path, framework):
    executor = dict(EXECUTORS[framework])
    image = executor.pop("image")
    ((package, version),) = executor.items()
    project = bake(tmp_path / "bake", framework=framework)
    roots = install_requires(project)
    names = {canonicalize_name(Requirement(line).name) for line in roots}
    assert package not in names and "xgboost-cpu" not in names, roots
    wheels = [
        line
        for line in roots
        if canonicalize_name(Requirement(line).name) not in SDIST_ONLY | SENT_BESIDE
    ]
    planned = plan(wheels, tmp_path / "target")
    problems = [
        f"{who} asks {requirement} (the executor {image} has {package} {version})"
        for who, requirement in framework_requirements(planned, roots, package)
        if not requirement.specifier.contains(Version(version), prereleases=True)
    ]
    assert not problems, "\n".join(problems)
    if framework == "xgboost":
        planned_names = {canonicalize_name(item["metadata"]["name"]) for item in planned}
        assert not planned_names & {"xgboost", "xgboost-cpu"}, "a second XGBoost package"


@pytest.mark.variant("xgboost")
def test_the_sdists_sent_together_install_without_the_index(tmp_path):
    """make submit PACKAGE=1's sdists, installed offline as the prebuilt container installs
    them (pip, every package URI): the runtime comes from its own sdist, never from the index,
    and setup.py leaves it out of install_requires (SENT_BESIDE), so the trainer's sdist installs
    whatever order Vertex takes. The trainer's other requirements come from the index on Vertex
    (planned above): here it asks for the runtime alone, so that pip needs no index at all."""
    project = bake(tmp_path / "bake", framework="xgboost")
    runtime = importlib.metadata.version("vertex-trainer-runtime")
    (project / "requirements.txt").write_text(f"vertex-trainer-runtime=={runtime}\n")
    assert install_requires(project) == [], "the runtime is sent beside, not required"
    sdists = submit_lib.package_sdists(project, tmp_path / "dist")
    names = [sdist.name.rsplit("-", 1)[0] for sdist in sdists]
    assert names == ["vertex_trainer_runtime", "vertex_trainer"], "the runtime's first"

    # pip's resolver with the index switched off, building with this environment's setuptools
    # (the container builds with its own) into a folder of its own (--target: nothing that is
    # installed here counts), then imported from that folder alone.
    target = tmp_path / "target"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-build-isolation",
         f"--target={target}", *map(str, sdists)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    found = subprocess.run(
        [sys.executable, "-S", "-c", "import importlib.metadata as m, vertex_trainer_runtime as r, "
         "trainer; print(m.version('vertex-trainer-runtime'), r.__file__)"],
        cwd=tmp_path, env={"PYTHONPATH": str(target)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    version, where = found.stdout.split()
    assert version == runtime and where.startswith(str(target)), found.stdout
