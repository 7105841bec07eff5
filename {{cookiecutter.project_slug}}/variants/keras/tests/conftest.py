"""Helpers for the Keras tests: a Vertex-free environment, tiny runs, image folders, what a
drill's job logged (framework-free ones: ``vertex_trainer_tools.testing``, ``.trainer_runs``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from vertex_trainer_runtime import checkpoints
from vertex_trainer_tools.testing import read_metrics, without_vertex
from vertex_trainer_tools.trainer_runs import run_replicas, without_vertex_variables

PROJECT = Path(__file__).resolve().parent.parent
# Small enough to train in about a second on one CPU core, big enough to learn.
TINY = [
    "--train-data=synthetic",
    "--eval-data=synthetic",
    "--model=small-cnn",
    "--image-size=16",
    "--synthetic-examples=64",
    "--batch-size=16",
    "--checkpoint-minutes=0",
]
# A tiny run on built-in data, also in the image (tests/test_hpt_contract.py, test_docker_image.py).
SMOKE_ARGS = [*TINY, "--epochs=2"]
# The image folders' classes, their image size, and the eval images: odd, no batch divides them.
CLASSES, SIZE, EVAL_IMAGES = ("amber", "blue", "cyan"), 16, 51


def pytest_configure(config):
    # tf-keras calls random.randint(1, 1e9), deprecated in Python 3.10: not ours to fix.
    config.addinivalue_line(
        "filterwarnings", "ignore:non-integer arguments to randrange:DeprecationWarning"
    )


@pytest.fixture(autouse=True)
def vertex_free_env(monkeypatch, tmp_path):
    """No Vertex variables leak in from the shell; the hypertune file goes to tmp_path."""
    metrics = str(tmp_path / "hypertune" / "output.metrics")
    without_vertex_variables(monkeypatch, CLOUD_ML_HP_METRIC_FILE=metrics)


@pytest.fixture
def metrics_file(tmp_path) -> Path:
    return tmp_path / "hypertune" / "output.metrics"


def write_images(root, count, seed, mislabel_every=0, shape=(SIZE, SIZE), jpeg_every=0):
    """``count`` PNGs, each class its own colour under noise; every ``mislabel_every``-th image is
    filed under the next class, so no model scores 100%; every ``jpeg_every``-th is a JPEG."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    for i in range(count):
        colour = i % len(CLASSES)
        pixels = 0.4 * rng.uniform(0, 255, (*shape, 3))
        pixels[..., colour] += 150
        label = (
            (colour + 1) % len(CLASSES) if mislabel_every and i % mislabel_every == 0 else colour
        )
        folder = root / CLASSES[label]
        folder.mkdir(parents=True, exist_ok=True)
        jpeg = jpeg_every and i % jpeg_every == 0
        encode, suffix = (tf.io.encode_jpeg, "JPG") if jpeg else (tf.io.encode_png, "png")
        (folder / f"img{i:03d}.{suffix}").write_bytes(encode(pixels.astype(np.uint8)).numpy())


@pytest.fixture(scope="session")
def image_folders(tmp_path_factory) -> tuple[Path, Path]:
    """A train folder (60 images, 20 x 24, one JPEG per class, a README.txt beside them and a
    hidden folder to ignore) and an eval folder (EVAL_IMAGES square PNGs, a quarter mislabelled)."""
    root = tmp_path_factory.mktemp("images")
    write_images(root / "train", 60, seed=1, shape=(20, 24), jpeg_every=20)
    for name in CLASSES:
        (root / "train" / name / "README.txt").write_text("not an image")
    (root / "train" / ".hidden").mkdir()
    write_images(root / "eval", EVAL_IMAGES, seed=2, mislabel_every=4)
    return root / "train", root / "eval"


def reported_epochs(path: Path) -> list[int]:
    return [int(line["global_step"]) for line in read_metrics(path)]


def resumed_at(job, replica: str = "workerpool0-0") -> tuple[int, int]:
    """(step, epochs done) of the checkpoint ``replica``'s second attempt resumed from."""
    pattern = re.compile(r"Resumed from \S+/checkpoint-(\d+) \(step \d+, (\d+) epochs done")
    lines = job.lines(replica, attempt=2)
    found = [match for match in map(pattern.search, lines) if match]
    assert found, "\n".join(lines)[-3000:]
    return int(found[0].group(1)), int(found[0].group(2))


def notice_steps(job) -> dict[str, int]:
    """The step each replica saved on a preemption notice."""
    saved = re.findall(r"^(workerpool\d-0) \| .*notice: saved checkpoint-(\d+)", job.output, re.M)
    return {replica: int(step) for replica, step in saved}


def final_step(output_dir) -> int:
    return checkpoints.latest_complete(str(output_dir / "checkpoints")).step


def train(argv: list[str]) -> int:
    """Run the trainer in this process (no TensorFlow start-up cost)."""
    import tf_keras

    from trainer import task

    tf_keras.backend.clear_session()
    return task.main(argv)


def subprocess_env(**extra: str) -> dict[str, str]:
    env = without_vertex(
        PYTHONPATH=str(PROJECT),
        TF_CPP_MIN_LOG_LEVEL="2",
        CUDA_VISIBLE_DEVICES="-1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def run_tasks(tmp_path: Path, argv: list[str], name: str, replicas: int = 2, **options) -> list:
    """``trainer_runs.run_replicas`` of this project with the environment above: ``options`` are its
    ``exit_code`` and ``code`` and further variables."""
    settings = {key: options.pop(key) for key in ("exit_code", "code") if key in options}
    env = subprocess_env(**options)
    return run_replicas(PROJECT, tmp_path, argv, name, replicas, env=env, **settings)
