"""YOURS TO CHANGE: the booster: its parameters (``params``), device, metric reports during
training, evaluation and the ``model.bst`` export. Checkpoints: ``resume.py``.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile

import xgboost as xgb
from vertex_trainer_runtime import checkpoints, hptune, runtime, tracking
from vertex_trainer_runtime.cli import InputError
from vertex_trainer_runtime.xgboost import throughput
from xgboost.callback import TrainingCallback

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


class MetricReporter(TrainingCallback):
    """Log the eval metric and report it for hyperparameter tuning (and to the Experiment run)
    every ``every`` rounds, with the training speed of those rounds (``throughput``).

    Without early stopping, XGBoost is not given the eval set (scoring it after every round
    costs about 12% of training time); the metric is computed here, every ``every`` rounds,
    from XGBoost's prediction cache of ``data`` (kept per matrix, in ``evals`` or not): each
    report predicts only the rounds added since the last one. Other rounds read nothing.
    """

    def __init__(
        self,
        reporter: hptune.MetricReporter,
        data: xgb.DMatrix,
        data_name: str,
        every: int,
        total: int,
        tracker: tracking.Tracker,
        speed: throughput.Throughput,
    ):
        super().__init__()
        self.reporter = reporter
        self.tracker = tracker
        self.data = data
        self.data_name = data_name
        self.every = every
        self.total = total
        self.speed = speed

    def before_training(self, model):
        self.speed.start(model.num_boosted_rounds())
        return model

    def after_iteration(self, model, epoch, evals_log) -> bool:
        rounds = model.num_boosted_rounds()
        if self.every and rounds % self.every == 0:
            logged = evals_log.get(self.data_name, {}).get(self.reporter.tag)
            if logged:
                value = logged[-1][0] if isinstance(logged[-1], tuple) else logged[-1]
            else:
                with self.speed.timing("evaluation"):
                    value = evaluate(model, self.data, self.data_name, self.reporter.tag)
            first = self.speed.mark[1] + 1
            figures = self.speed.interval(rounds)
            tag = f"{self.data_name}-{self.reporter.tag}"
            logger.info("round %d/%d: %s=%.6g", rounds, self.total, tag, value)
            self.reporter.report(value, rounds)
            if self.reporter.enabled:  # the chief's speed
                throughput.log_interval(first, rounds, figures)
            self.tracker.log_evaluation({self.reporter.tag: value, **figures}, rounds)
        return False


def configure(booster: xgb.Booster, params: dict) -> xgb.Booster:
    """Apply training ``params`` to a loaded or sliced booster (lists: repeated keys)."""
    items = []
    for key, value in params.items():
        if isinstance(value, list):
            items.extend((key, item) for item in value)
        else:
            items.append((key, value))
    booster.set_param(items)
    return booster


def evaluate(booster: xgb.Booster, data: xgb.DMatrix, name: str, metric: str) -> float:
    """``metric`` of ``booster`` on ``data``; a collective call when distributed (every replica
    holds all eval rows, so XGBoost's all-reduced value is exact: train.evaluation_rows).
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
