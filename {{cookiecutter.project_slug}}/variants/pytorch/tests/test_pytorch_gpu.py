"""GPU paths of the PyTorch trainer (``make test-gpu``): bf16 autocast, every GPU of one replica.

Each test starts ``python -m trainer.task`` (the public CLI) on the tiny BERT of conftest.py.
Without a CUDA GPU (CI, laptops, CPU builds of torch) every test here is skipped with the
reason; on a GPU VM: ``make test-gpu`` or ``python -m pytest -m gpu -rs``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from conftest import (
    PROJECT,
    base_args,
    printed_losses,
    reviews,
    start,
    trainer_env,
    wait,
    write_csv,
)
from vertex_trainer_runtime import checkpoints
from vertex_trainer_runtime.torch import throughput
from vertex_trainer_tools.testing import read_metrics


def _no_cuda_reason() -> str:
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU-only build"
    return f"no CUDA GPU: torch.cuda.is_available() is False (torch {torch.__version__}, {build})"


CUDA = torch.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason=_no_cuda_reason())]


def _native_bf16() -> bool:
    """bf16 tensor cores: compute capability 8.0 or newer (A100, L4, H100; not T4 or V100).

    Deliberately not ``torch.cuda.is_bf16_supported()``, which is also True where bf16 is only
    emulated (slowly) on older GPUs.
    """
    return CUDA and torch.cuda.get_device_capability(0)[0] >= 8


def _gpu_name() -> str:
    major, minor = torch.cuda.get_device_capability(0)
    return f"{torch.cuda.get_device_name(0)} (sm_{major}{minor})"


# Runs trainer.task's main() with a global forward hook that records the device and dtype of
# every nn.Linear output while a module trains: bfloat16 under bf16 autocast, float16 under
# fp16, float32 without. Ground truth from the tensors themselves, not from the trainer's flags.
DTYPE_PROBE = """
import json, sys, torch
from trainer import task
seen = set()
def record(module, inputs, output):
    if isinstance(module, torch.nn.Linear) and module.training and torch.is_tensor(output):
        seen.add(f"{output.device.type}:{str(output.dtype).replace('torch.', '')}")
torch.nn.modules.module.register_module_forward_hook(record)
code = task.main(sys.argv[2:])
with open(sys.argv[1], "w") as handle:
    json.dump(sorted(seen), handle)
sys.exit(code)
"""


def _first_gpu() -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible or "0"


def _train_one_gpu(argv: list[str], tmp_path) -> list[str]:
    """Train on the first GPU only; the dtypes of the Linear outputs seen while training."""
    dtypes_file = tmp_path / "dtypes.json"
    env = trainer_env(CUDA_VISIBLE_DEVICES=_first_gpu())
    result = subprocess.run(
        [sys.executable, "-c", DTYPE_PROBE, str(dtypes_file), *argv],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Processes: 1 (cuda:0)" in result.stderr, result.stderr[-4000:]
    return json.loads(dtypes_file.read_text())


def _check_finite_losses(job) -> None:
    """Every training loss HF Trainer logged (newest complete checkpoint) is a finite number."""
    newest = checkpoints.latest_complete(str(job / "checkpoints"))
    assert newest is not None, f"no complete checkpoint in {job / 'checkpoints'}"
    with open(os.path.join(newest.path, "trainer_state.json"), encoding="utf-8") as handle:
        state = json.load(handle)
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert losses and all(math.isfinite(loss) for loss in losses), losses


NO_BF16 = _no_cuda_reason() if not CUDA else f"no native bf16 (sm_80 or newer) on {_gpu_name()}"


@pytest.mark.skipif(not _native_bf16(), reason=NO_BF16)
def test_bf16_trains_in_bfloat16_learns_and_exports(tiny_bert, csv_data, tmp_path):
    job = tmp_path / "job"
    argv = [*base_args(tiny_bert, csv_data, job), "--epochs=4", "--precision=bf16"]

    dtypes = _train_one_gpu(argv, tmp_path)

    assert dtypes == ["cuda:bfloat16"], f"autocast did not run the matmuls in bf16: {dtypes}"
    _check_finite_losses(job)
    # The same task the CPU test learns (tests/test_pytorch_train.py): bf16 must not break it.
    records = read_metrics(os.environ["CLOUD_ML_HP_METRIC_FILE"])
    assert len(records) == 4, records  # one evaluation per epoch
    accuracy = float(records[-1]["accuracy"])
    assert math.isfinite(accuracy) and accuracy >= 0.75, records
    model_dir = job / "model"
    assert (model_dir / "model.safetensors").is_file()
    config = json.loads((model_dir / "config.json").read_text())
    assert set(config["id2label"].values()) == {"negative", "positive"}


def test_auto_precision_is_bf16_where_native_else_fp16(tiny_bert, csv_data, tmp_path):
    job = tmp_path / "job"
    argv = [*base_args(tiny_bert, csv_data, job), "--max-steps=6", "--save-steps=3"]

    dtypes = _train_one_gpu(argv, tmp_path)  # --precision=auto is the default

    expected = "bfloat16" if _native_bf16() else "float16"
    assert dtypes == [f"cuda:{expected}"], f"{_gpu_name()}: auto trained in {dtypes}"
    _check_finite_losses(job)
    records = read_metrics(os.environ["CLOUD_ML_HP_METRIC_FILE"])
    assert records and math.isfinite(float(records[-1]["accuracy"])), records
    assert (job / "model" / "model.safetensors").is_file()


@pytest.mark.distributed
def test_one_replica_trains_one_process_per_gpu(tiny_bert, tmp_path):
    """``--nproc-per-node=0`` (the default): torchrun with as many DDP processes as GPUs."""
    gpus = torch.cuda.device_count()
    # 64 examples per GPU at 16 per process: 4 steps per epoch only if every GPU takes a share.
    data = {
        "train": write_csv(tmp_path / "train.csv", reviews(64 * gpus, seed=1)),
        "eval": write_csv(tmp_path / "eval.csv", reviews(32, seed=2)),
    }
    job = tmp_path / "job"
    argv = [*base_args(tiny_bert, data, job), "--epochs=1"]
    process = start(argv, tmp_path / "run.log")
    code = wait(process, timeout=600)
    log = (tmp_path / "run.log").read_text()
    assert code == 0, log[-4000:]

    assert f"Processes: {gpus} (cuda:0)" in log, log[-4000:]
    if gpus > 1:
        assert f"Launching {gpus} process(es) on node 0 of 1" in log, log[-4000:]
    records = read_metrics(os.environ["CLOUD_ML_HP_METRIC_FILE"])
    assert [int(record["global_step"]) for record in records] == [4], records
    _check_finite_losses(job)
    assert (job / "model" / "model.safetensors").is_file()


def test_compiled_training_resumes_and_logs_model_flops(tiny_bert, csv_data, tmp_path):
    """``--torch-compile`` on a GPU: the losses of eager steps, checkpoints of the uncompiled
    weights that a second run resumes from (with the compiler's cache), and the speed with
    model-FLOPs use in the log."""
    job = tmp_path / "job"
    argv = [*base_args(tiny_bert, csv_data, job), "--max-steps=4", "--save-steps=2"]
    argv += ["--nproc-per-node=1", "--precision=fp32"]
    env = trainer_env(CUDA_VISIBLE_DEVICES=_first_gpu())

    def run(extra: list[str]) -> str:
        command = [sys.executable, "-m", "trainer.task", *argv, *extra]
        result = subprocess.run(
            command, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, result.stderr[-4000:]
        return result.stdout + result.stderr

    eager = run([f"--job-dir={tmp_path / 'eager'}"])
    compiled = run(["--torch-compile"])
    losses = [printed_losses(log) for log in (eager, compiled)]
    assert len(losses[1]) == 4 and losses[1] == pytest.approx(losses[0], rel=1e-2), losses
    speed = [line for line in compiled.splitlines() if "Speed at step" in line]
    assert speed and all("examples/s" in line for line in speed), compiled[-4000:]
    if throughput.peak_tflops(torch.cuda.get_device_name(0)):
        assert all("% of peak" in line for line in speed), speed
    # Resume the compiled run from its checkpoint: the state dict has no _orig_mod prefix.
    resumed = run(["--torch-compile", "--max-steps=6"])
    assert "Resuming from checkpoint-4" in resumed, resumed[-4000:]
    # The compiler's cache, saved beside the first checkpoint, is what the restart compiles from.
    assert "Saved torch.compile's cache" in compiled, compiled[-4000:]
    assert "Loaded torch.compile's cache" in resumed, resumed[-4000:]
    newest = checkpoints.latest_complete(str(job / "checkpoints"))
    assert newest is not None and newest.path.endswith("checkpoint-6")
    _check_finite_losses(job)
