"""Every prebuilt image a fresh project names by default is one Google still serves.

The dates are the tools' table (vertex_trainer_tools/data/image_dates.csv). A default must be
the newest image of its kind the table holds as available today, or, where none is left (the
package-mode executors), empty: package mode then says to use the custom container. Base images
the table does not hold (nvidia/cuda, python:slim) are not Google's prebuilt images.
"""

from __future__ import annotations

import datetime
import re

import pytest
import yaml
from vertex_trainer_tools import image_dates

from conftest import BASE_IMAGES, FRAMEWORKS, bake

TABLE_FRAMEWORK = {"keras": "TensorFlow", "pytorch": "PyTorch", "xgboost": "XGBoost"}
CPU = {"accelerator_type": "NONE", "accelerator_count": "0"}


def default_project(tmp_path, framework: str, gpu: bool, base: str):
    return bake(tmp_path, framework=framework, base_image=base, **({} if gpu else CPU))


def assert_current(image: str, what: str) -> None:
    """Not past its end of availability, and the newest of its family the table holds."""
    row = image_dates.find(image)
    if row is None:
        return
    on = image_dates.today()
    assert not image_dates.refusal(image, on), f"{what}: {image_dates.refusal(image, on)}"
    newest = image_dates.newest(row.role, row.framework, row.accelerator, on, like=image)
    assert image_dates.key(newest.image) == image_dates.key(image), f"{what}: {newest.image}"


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_default_executor_is_the_newest_available(tmp_path, framework, gpu):
    project = default_project(tmp_path, framework, gpu, BASE_IMAGES[0])
    data = yaml.safe_load((project / "vertex.yaml").read_text())
    executor = data["python_package"]["executor_image_uri"]
    accelerator = "gpu" if gpu else "cpu"
    newest = image_dates.newest(
        "executor", TABLE_FRAMEWORK[framework], accelerator, image_dates.today()
    )
    assert executor == (newest.image if newest else ""), (framework, accelerator, newest)
    assert_current(data["model"]["serving_image"], f"{framework}: model.serving_image")


@pytest.mark.parametrize("base", BASE_IMAGES)
@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_default_base_image_is_available(tmp_path, framework, gpu, base):
    project = default_project(tmp_path, framework, gpu, base)
    (image,) = re.findall(r"^ARG BASE_IMAGE=(\S+)$", (project / "Dockerfile").read_text(), re.M)
    assert_current(image, f"{framework} {base} Dockerfile BASE_IMAGE")


def test_an_expired_default_would_fail(monkeypatch):
    """The check above bites: a day after TensorFlow 2.17's training image went away."""
    image = "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest"
    monkeypatch.setattr(image_dates, "today", lambda: datetime.date(2026, 7, 12))
    with pytest.raises(AssertionError, match="end of availability on 2026-07-11"):
        assert_current(image, "executor")
