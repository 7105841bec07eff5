"""XGBoost on CUDA (``make test-gpu``): the trainer picks the GPU and scores like the CPU run.

Skipped, with the reason, unless the installed XGBoost is the CUDA build (package ``xgboost``;
the project installs ``xgboost-cpu``) and it can really train a round on a GPU. On a GPU VM:
``pip uninstall -y xgboost-cpu && pip install "xgboost~=<the xgboost-cpu version>"``, then
``make test-gpu`` or ``python -m pytest -m gpu -rs``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import xgboost as xgb
from conftest import FAST, check_ok, features, load_model, read_metrics, run_trainer, trainer_env
from sklearn import metrics
from vertex_trainer_tools.testing import nvidia_gpu_count

FALLBACK_WARNING = "Device is changed from GPU to CPU"  # XGBoost's own, when it finds no GPU


def _no_cuda_reason() -> str | None:
    if not xgb.build_info().get("USE_CUDA"):
        return (
            f"xgboost {xgb.__version__} is a CPU-only build (build_info()['USE_CUDA'] is false): "
            "install the CUDA build, package 'xgboost' at the same version, in place of "
            "'xgboost-cpu'"
        )
    if nvidia_gpu_count() == 0:
        return "no NVIDIA GPU: nvidia-smi -L lists none and /proc/driver/nvidia/gpus is empty"
    # XGBoost falls back to the CPU with a warning when it finds no usable GPU: check one round.
    rows = xgb.DMatrix(np.arange(8.0).reshape(4, 2), label=[0, 1, 0, 1])
    try:
        booster = xgb.train({"device": "cuda", "tree_method": "hist"}, rows, 1)
    except xgb.core.XGBoostError as error:
        return f"XGBoost cannot train on CUDA: {str(error).strip().splitlines()[0]}"
    device = json.loads(booster.save_config())["learner"]["generic_param"]["device"]
    if not device.startswith("cuda"):
        return f"XGBoost trained a device='cuda' round on {device!r}: no usable GPU"
    return None


REASON = _no_cuda_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]


def _train(breast_cancer, tmp_path, name: str, device_flags: list[str]) -> dict:
    """One run on the bundled breast cancer split; its log, exported model and metrics."""
    job = tmp_path / name
    env = trainer_env(CLOUD_ML_HP_METRIC_FILE=str(job / "metrics"))
    args = [f"--train-data={breast_cancer['train']}", f"--eval-data={breast_cancer['test']}"]
    args += ["--label-column=target", "--num-boost-round=50", "--report-rounds=10"]
    args += [f"--job-dir={job}", *device_flags, *FAST]
    result = run_trainer(args, env)
    check_ok(result)
    booster, metadata = load_model(job / "model")
    test = breast_cancer["test_frame"]
    # The exported model scored by scikit-learn on the CPU, independently of the trainer.
    probability = booster.predict(features(test, metadata))
    return {
        "log": result.stderr,
        "reported_auc": float(read_metrics(job / "metrics")[-1]["auc"]),
        "metadata_auc": metadata["metric"]["value"],
        "sklearn_auc": metrics.roc_auc_score(test["target"], probability),
        "accuracy": float(np.mean((probability > 0.5) == test["target"].to_numpy())),
    }


@pytest.mark.parametrize("device_flags", [[], ["--device=cuda"]], ids=["auto", "cuda"])
def test_trains_on_cuda_with_the_cpu_runs_metric(breast_cancer, tmp_path, device_flags):
    gpu = _train(breast_cancer, tmp_path, "gpu", device_flags)
    cpu = _train(breast_cancer, tmp_path, "cpu", ["--device=cpu"])

    assert "Trained 50 rounds (model: 50)" in gpu["log"] and " on cuda; " in gpu["log"], gpu["log"]
    assert FALLBACK_WARNING not in gpu["log"], gpu["log"][-4000:]
    assert " on cpu; " in cpu["log"], cpu["log"]
    for run in (gpu, cpu):
        # What the trainer reported is the exported model's AUC, per scikit-learn.
        assert run["reported_auc"] == pytest.approx(run["sklearn_auc"], abs=1e-4)
        assert run["metadata_auc"] == pytest.approx(run["sklearn_auc"], abs=1e-4)
        assert run["accuracy"] > 0.9, run["accuracy"]
    # GPU and CPU histograms sum in different orders: close, not bit-identical, trees.
    assert gpu["sklearn_auc"] == pytest.approx(cpu["sklearn_auc"], abs=0.01)
