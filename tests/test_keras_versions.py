"""Each Keras image path pins one TensorFlow in every file that names it.

The Deep Learning Containers answer keeps the TensorFlow Google preinstalls in its newest tf2
image (2.17); the nvidia-cuda answer pip-installs the newest release
(2.21). tests/test_generated.py trains the default (DLC) bake only, so the nvidia-cuda bakes are
checked here as rendered: requirements.txt, the Dockerfile, the Makefile's lock for the base's
Python (with TensorFlow's CUDA wheels on the GPU image), requirements-dev.txt's protobuf pins
and docs/images.md's table must agree (the project's own test_tensorflow_version_agrees then holds
them against the installed TensorFlow).
"""

from __future__ import annotations

import re

import pytest
import yaml

from conftest import bake

NO_GPU = {"accelerator_type": "NONE", "accelerator_count": "0", "machine_type": "n1-standard-4"}
# (answers, TensorFlow minor, the Dockerfile's default base image)
PATHS = {
    "dlc-gpu": ({"base_image": "deep-learning-container"}, "2.17", "tf2-gpu.2-17.py310:latest"),
    "dlc-cpu": ({"base_image": "deep-learning-container", **NO_GPU}, "2.17", "tf2-cpu.2-17.py310"),
    "cuda-gpu": ({"base_image": "nvidia-cuda"}, "2.21", "nvidia/cuda:12.5.1-runtime-ubuntu22.04"),
    "cuda-cpu": ({"base_image": "nvidia-cuda", **NO_GPU}, "2.21", "python:3.12-slim"),
}
PROTOBUF_4 = "protobuf>=4.25.8,<5"  # TensorFlow 2.17's; 2.21 asks protobuf >= 6.31


@pytest.mark.variant("keras")
@pytest.mark.parametrize("path", list(PATHS))
def test_one_tensorflow_per_image_path(tmp_path, path):
    answers, version, base = PATHS[path]
    project = bake(tmp_path, framework="keras", **answers)
    requirements = (project / "requirements.txt").read_text()
    for package in ("tensorflow", "tf-keras", "tensorboard"):
        assert re.search(rf"^{package}=={re.escape(version)}\.\*$", requirements, re.M), package

    dockerfile = (project / "Dockerfile").read_text()
    default_base = re.search(r"^ARG BASE_IMAGE=(\S+)", dockerfile, re.M).group(1)
    assert base in default_base
    assert not re.search(r"pip install[^\n]*tensorflow", dockerfile), "the lock installs it"
    makefile = (project / "Makefile").read_text()
    python = re.search(r"^LOCK_PYTHON \?= (\S+)", makefile, re.M).group(1)
    assert python == ("3.12" if "python:3.12" in base else "3.10"), "the lock is for the base's"
    replace = re.search(r"^LOCK_REPLACE \?=(.*)$", makefile, re.M).group(1).strip()
    gpu_cuda = path == "cuda-gpu"
    assert replace == ("tensorflow=tensorflow[and-cuda]" if gpu_cuda else ""), "CUDA wheels"

    dev = (project / "requirements-dev.txt").read_text()
    assert (PROTOBUF_4 in dev) == (version == "2.17")
    # Google serves no TensorFlow executor any more (tests/test_image_dates.py): none is named.
    config = yaml.safe_load((project / "vertex.yaml").read_text())
    assert config["python_package"]["executor_image_uri"] == ""

    images = (project / "docs" / "images.md").read_text()
    row = re.search(rf"^\| `{answers['base_image']}` \|.*$", images, re.M).group(0)
    assert f"tf-keras {version}" in row
