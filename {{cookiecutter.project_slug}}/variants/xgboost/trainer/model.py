"""YOURS TO CHANGE: the booster: its parameters (``params``), device, evaluation and the
``model.bst`` export. The runtime reports the metric during training and checkpoints the booster
(``vertex_trainer_runtime.xgboost``: ``rounds``, ``resume``).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile

import xgboost as xgb
from vertex_trainer_runtime import checkpoints, runtime
from vertex_trainer_runtime.cli import InputError

from trainer.flags import Model
from trainer.spec import SPEC

logger = logging.getLogger(__name__)

MODEL_FILE = SPEC.export_file  # model.bst: the name the prebuilt XGBoost prediction image loads
METADATA_FILE = "model_metadata.json"


def gpu_present() -> bool:
    return os.path.exists("/dev/nvidia0") or bool(
        os.path.isdir("/proc/driver/nvidia/gpus") and os.listdir("/proc/driver/nvidia/gpus")
    )


def device(flag: str) -> str:
    """``cuda`` when asked, or on ``auto`` when a GPU and a CUDA build of XGBoost are present."""
    cuda_build = bool(xgb.build_info().get("USE_CUDA"))
    if flag == "cuda" and not cuda_build:
        raise InputError(
            "--device=cuda needs the CUDA build of XGBoost (package 'xgboost', not 'xgboost-cpu')"
        )
    if flag != "auto":
        return flag
    if gpu_present():
        if cuda_build:
            return "cuda"
        logger.warning("A GPU is present but this XGBoost build is CPU-only: training on CPU")
    return "cpu"


def params(
    options: Model,
    objective,
    metric_names: list[str],
    num_class: int,
    device: str,
    threads: int,
    seed: int,
) -> dict:
    """XGBoost's training parameters from the ``--objective``/``--max-depth``/... flags."""
    # Outside the marked lines, what the run relies on: the objective and eval metrics the
    # tuning metric follows, hist on the chosen device, and the seed a resumed run repeats.
    result = {
        "objective": objective.name,
        "tree_method": "hist",
        "device": device,
        "nthread": threads,
        # --- yours to change --- (a new booster parameter: a Model flag and its line here)
        "max_depth": options.max_depth,
        "eta": options.eta,
        "subsample": options.subsample,
        "colsample_bytree": options.colsample_bytree,
        "min_child_weight": options.min_child_weight,
        "max_bin": options.max_bin,
        # --- end ---
        "eval_metric": metric_names,
        "seed": seed,
    }
    if objective.kind == "multiclass":
        result["num_class"] = num_class
    if options.base_score != "auto":
        result["base_score"] = options.base_score
    return result


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def evaluate(booster: xgb.Booster, data: xgb.DMatrix, name: str, metric: str) -> float:
    """``metric`` of ``booster`` on ``data``; a collective call when distributed (every replica
    holds all eval rows, so XGBoost's all-reduced value is exact: data.evaluation_rows).
    ``eval_set`` adds to ``data``'s cached predictions the trees not yet in them."""
    text = booster.eval_set([(data, name)], iteration=booster.num_boosted_rounds() - 1)
    for item in text.split()[1:]:
        key, _, value = item.rpartition(":")
        if key == f"{name}-{metric}":
            return float(value)
    raise RuntimeError(f"metric {metric} missing from XGBoost's evaluation: {text}")


# --- export ----------------------------------------------------------------------------------


def export(booster: xgb.Booster, model_dir: str, metadata: dict) -> str:
    """Write ``model.bst`` and ``model_metadata.json`` to the local path ``model_dir`` (chief).

    The booster is saved without feature names: the prediction container builds its matrix
    from plain lists of numbers, which a booster with names refuses. The names, category
    codes and classes are in the metadata file instead. Files are written locally and then
    copied, one writer per file, which the ``/gcs/`` mount handles well.
    """
    booster = booster.copy()
    booster.feature_names = None
    booster.feature_types = None
    with tempfile.TemporaryDirectory(prefix="xgb-export-") as local:
        with open(os.path.join(local, METADATA_FILE), "w", encoding="utf-8") as handle:
            json.dump(metadata, handle, indent=1, sort_keys=True, default=str)
        with open(os.path.join(local, MODEL_FILE), "wb") as handle:
            handle.write(booster.save_raw(raw_format="ubj"))
        # model.bst last: its presence means the export is done.
        checkpoints.copy_files(local, model_dir, (METADATA_FILE, MODEL_FILE))
    path = os.path.join(model_dir, MODEL_FILE)
    logger.info("Exported %s to %s", MODEL_FILE, runtime.to_gcs_uri(path))
    return path
