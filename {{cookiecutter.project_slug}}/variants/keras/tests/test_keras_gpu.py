"""GPU paths of the Keras trainer (``make test-gpu``): one GPU, and MirroredStrategy on several.

Each runs ``trainer.task.main`` in a fresh process that sees the GPUs (the other tests' do not)
and reads TensorFlow's peak memory per GPU; skipped with the reason without a GPU.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import tensorflow as tf
from conftest import PROJECT, TINY, read_metrics, reported_epochs, subprocess_env
from vertex_trainer_runtime import checkpoints, speed
from vertex_trainer_runtime.keras import precision

GPUS = tf.config.list_physical_devices("GPU")
NO_GPU = (
    f"no GPU visible to TensorFlow {tf.__version__} (built with CUDA: "
    f"{tf.test.is_built_with_cuda()}; on a GPU VM: the tf-gpu image or tensorflow[and-cuda])"
)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not GPUS, reason=NO_GPU)]

# trainer.task's main(), then the peak bytes TensorFlow's allocator held on each GPU.
MEMORY_PROBE = """
import json, sys
import tensorflow as tf
from trainer import task
code = task.main(sys.argv[2:])
gpus = range(len(tf.config.list_logical_devices("GPU")))
peaks = {f"GPU:{i}": tf.config.experimental.get_memory_info(f"GPU:{i}")["peak"] for i in gpus}
with open(sys.argv[1], "w") as handle:
    json.dump(peaks, handle)
sys.exit(code)
"""


def _visible_gpus() -> list[str]:
    """The CUDA device ids this process may use, as CUDA_VISIBLE_DEVICES lists them."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [str(index) for index in range(len(GPUS))]
    return [device.strip() for device in listed.split(",") if device.strip()]


def _train(argv: list[str], gpus: list[str], tmp_path, metrics_file) -> tuple[str, dict]:
    """The run's log and the peak memory per GPU; fails the test on a non-zero exit."""
    peaks_file = tmp_path / "gpu-peaks.json"
    env = subprocess_env(
        CUDA_VISIBLE_DEVICES=",".join(gpus),
        TF_FORCE_GPU_ALLOW_GROWTH="true",  # several pytest workers may share the GPUs
        CLOUD_ML_HP_METRIC_FILE=str(metrics_file),
    )
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(peaks_file), *argv],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    return log, json.loads(peaks_file.read_text())


def _check_learned(job, metrics_file, steps_per_epoch: int) -> None:
    """The same bar as the CPU test (tests/test_keras_train.py), and the epochs checkpointed."""
    assert reported_epochs(metrics_file) == [1, 2]
    accuracy = float(read_metrics(metrics_file)[-1]["accuracy"])
    assert accuracy >= 0.75, f"4 separable classes, chance is 0.25: {accuracy}"
    latest = checkpoints.latest_complete(str(job / "checkpoints"))
    assert latest is not None and latest.step == 2 * steps_per_epoch
    assert (job / "model" / "saved_model.pb").is_file()


def test_trains_on_one_gpu(tmp_path, metrics_file):
    """With --precision=auto (the default): mixed_bfloat16 from compute capability 8.0,
    mixed_float16 on T4/V100 (the rule itself: the runtime's test_keras_precision.py); the speed
    lines give the MFU on a GPU whose peak the runtime knows."""
    job = tmp_path / "job"
    argv = [*TINY, "--synthetic-examples=256", "--learning-rate=0.01", "--epochs=2"]

    log, peaks = _train([*argv, f"--job-dir={job}"], _visible_gpus()[:1], tmp_path, metrics_file)

    assert "Default strategy on one task: 1 replica(s), global batch 16" in log, log[-4000:]
    assert list(peaks) == ["GPU:0"] and peaks["GPU:0"] > 0, peaks
    _check_learned(job, metrics_file, steps_per_epoch=256 // 16)
    major, minor = tf.config.experimental.get_device_details(GPUS[0])["compute_capability"]
    expected = precision.choose("gpu", (major, minor))
    assert f"Precision {expected} (--precision=auto, GPU compute capability {major}.{minor})" in log
    latest = checkpoints.latest_complete(str(job / "checkpoints"))
    assert latest.metadata()["precision"] == expected
    name = tf.config.experimental.get_device_details(GPUS[0]).get("device_name", "")
    if speed.peak_tflops(name):
        assert re.search(r"model TFLOPS per replica = \d+\.\d % of peak", log), log[-4000:]


@pytest.mark.skipif(
    len(GPUS) < 2,
    reason=NO_GPU if not GPUS else f"MirroredStrategy needs 2+ GPUs, {len(GPUS)} seen",
)
def test_mirrored_strategy_trains_on_every_gpu(tmp_path, metrics_file):
    gpus = _visible_gpus()
    count = len(gpus)
    job = tmp_path / "job"
    # 256 images per GPU at 16 per replica: 16 steps per epoch, as on one GPU.
    argv = [*TINY, f"--synthetic-examples={256 * count}", "--learning-rate=0.01", "--epochs=2"]

    log, peaks = _train([*argv, f"--job-dir={job}"], gpus, tmp_path, metrics_file)

    expected = (
        f"MirroredStrategy on one task: {count} replica(s), global batch {16 * count} "
        "(16 per replica), 16 steps per epoch"
    )
    assert expected in log, log[-4000:]
    assert len(peaks) == count and all(peak > 0 for peak in peaks.values()), peaks
    _check_learned(job, metrics_file, steps_per_epoch=16)
