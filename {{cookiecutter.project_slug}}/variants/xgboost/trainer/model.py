"""The booster: resumable training callbacks, checkpoints, export (objectives: objectives.py).

Resume works at boosting-round granularity: a checkpoint is the whole booster (UBJSON) after
some rounds, and a restarted run continues it with ``xgb.train(..., xgb_model=booster)`` for the
remaining rounds only. The round count always comes from the loaded booster
(``num_boosted_rounds()``), never from a file name. Early stopping keeps its state in the
booster's ``best_iteration``/``best_score`` attributes, and a round's checkpoint is taken after
early stopping has scored that round (train.boost orders the callbacks), so a restart stops at
the same round, with the same best round, as a run without one.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile

import xgboost as xgb
from xgboost.callback import EarlyStopping, TrainingCallback

from trainer import checkpoints, hptune, runtime
from trainer.cli import InputError

logger = logging.getLogger(__name__)

MODEL_FILE = "model.bst"  # the exact name Vertex's prebuilt XGBoost prediction container loads
METADATA_FILE = "model_metadata.json"
CHECKPOINT_FILE = "model.ubj"


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


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# --- checkpoints -----------------------------------------------------------------------------


def load_checkpoint(folder: str) -> xgb.Booster:
    """The booster in a checkpoint folder (raises when it cannot be loaded)."""
    booster = xgb.Booster()
    booster.load_model(os.path.join(folder, CHECKPOINT_FILE))
    if booster.num_boosted_rounds() < 1:
        raise ValueError("the booster has no trees")
    return booster


def latest_booster(root: str, validate=None) -> xgb.Booster | None:
    """The booster of the newest complete, loadable checkpoint under ``root``, if any."""

    loaded: dict[str, xgb.Booster] = {}

    def check(folder: str) -> None:
        booster = load_checkpoint(folder)
        if validate is not None:
            validate(booster)
        loaded[folder] = booster

    found = checkpoints.latest_complete(root, validate=check)
    if found is None:
        return None
    booster = loaded[found.path]
    logger.info(
        "Resuming from %s: %d rounds done",
        runtime.to_gcs_uri(found.path),
        booster.num_boosted_rounds(),
    )
    return booster


def save_checkpoint(booster: xgb.Booster, root: str, keep: int = 2) -> None:
    """Publish the booster as ``checkpoint-<rounds>`` (complete marker last), prune old ones."""
    rounds = booster.num_boosted_rounds()
    with tempfile.TemporaryDirectory(prefix="xgb-checkpoint-") as local:
        with open(os.path.join(local, CHECKPOINT_FILE), "wb") as handle:
            handle.write(booster.save_raw(raw_format="ubj"))
        os.makedirs(runtime.local_path(root), exist_ok=True)
        checkpoints.publish(local, root, rounds, {"rounds": rounds, "xgboost": xgb.__version__})
    checkpoints.prune(root, keep=keep)


class Checkpointer(TrainingCallback):
    """Checkpoint every ``every`` rounds, every ``minutes`` minutes and at the end (rank 0)."""

    def __init__(self, root: str, every: int, minutes: float, enabled: bool):
        super().__init__()
        self.root = root
        self.every = every
        self.interval = checkpoints.Interval(minutes)
        self.enabled = enabled
        self.saved_at = -1

    def save(self, booster: xgb.Booster) -> None:
        rounds = booster.num_boosted_rounds()
        if self.enabled and rounds != self.saved_at:
            save_checkpoint(booster, self.root)
            self.saved_at = rounds
            self.interval.reset()

    def after_iteration(self, model, epoch, evals_log) -> bool:
        rounds = model.num_boosted_rounds()
        if (self.every and rounds % self.every == 0) or self.interval.due():
            self.save(model)
        return False

    def after_training(self, model):
        self.save(model)
        return model


class ResumableEarlyStopping(EarlyStopping):
    """XGBoost's early stopping, restarted from the state the booster carries.

    ``EarlyStopping`` records ``best_iteration`` and ``best_score`` as booster attributes;
    after a resume, the rounds since the best one continue to count instead of restarting.
    """

    def __init__(self, rounds: int, metric_name: str, data_name: str):
        # save_best stays off: checkpoints need every round; the export truncates instead.
        super().__init__(rounds=rounds, metric_name=metric_name, data_name=data_name)

    def before_training(self, model):
        model = super().before_training(model)
        restored = restored_early_stopping(model)
        if restored is not None:
            best_iteration, best_score = restored
            name, metric = self.data, self.metric_name
            self.stopping_history = {name: {metric: [best_score]}}
            self.best_scores = {name: {metric: [best_score]}}
            self.current_rounds = model.num_boosted_rounds() - 1 - best_iteration
            logger.info(
                "Early stopping resumed: best %s=%.6g at round %d, %d rounds since",
                metric,
                best_score,
                best_iteration + 1,
                self.current_rounds,
            )
        return model


def restored_early_stopping(booster: xgb.Booster) -> tuple[int, float] | None:
    """(best_iteration, best_score) saved in a booster by early stopping, if any."""
    iteration, score = booster.attr("best_iteration"), booster.attr("best_score")
    if iteration is None or score is None:
        return None
    return int(iteration), float(score)


class MetricReporter(TrainingCallback):
    """Log the eval metric and report it for hyperparameter tuning every ``every`` rounds.

    Without early stopping, XGBoost is not given the eval set (scoring it after every round
    cost 12% of training time in bench/); the metric is computed here, every ``every`` rounds.
    """

    def __init__(
        self,
        reporter: hptune.MetricReporter,
        data: xgb.DMatrix,
        data_name: str,
        every: int,
        total: int,
    ):
        super().__init__()
        self.reporter = reporter
        self.data = data
        self.data_name = data_name
        self.every = every
        self.total = total

    def after_iteration(self, model, epoch, evals_log) -> bool:
        rounds = model.num_boosted_rounds()
        if self.every and rounds % self.every == 0:
            logged = evals_log.get(self.data_name, {}).get(self.reporter.tag)
            if logged:
                value = logged[-1][0] if isinstance(logged[-1], tuple) else logged[-1]
            else:
                value = evaluate(model, self.data, self.data_name, self.reporter.tag)
            logger.info(
                "round %d/%d: %s-%s=%.6g",
                rounds,
                self.total,
                self.data_name,
                self.reporter.tag,
                value,
            )
            self.reporter.report(value, rounds)
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
    holds all eval rows, so XGBoost's all-reduced value is exact: train.evaluation_rows)."""
    text = booster.eval_set([(data, name)], iteration=booster.num_boosted_rounds() - 1)
    for item in text.split()[1:]:
        key, _, value = item.rpartition(":")
        if key == f"{name}-{metric}":
            return float(value)
    raise RuntimeError(f"metric {metric} missing from XGBoost's evaluation: {text}")


# --- export ----------------------------------------------------------------------------------


def export(booster: xgb.Booster, model_dir: str, metadata: dict) -> str:
    """Write ``model.bst`` and ``model_metadata.json`` to the model dir (chief only).

    The booster is saved without feature names: the prediction container builds its matrix
    from plain lists of numbers, which a booster with names refuses. The names, category
    codes and classes are in the metadata file instead. Files are written locally and then
    copied, one writer per file, which the ``/gcs/`` mount handles well.
    """
    booster = booster.copy()
    booster.feature_names = None
    booster.feature_types = None
    destination = runtime.local_path(model_dir)
    with tempfile.TemporaryDirectory(prefix="xgb-export-") as local:
        with open(os.path.join(local, METADATA_FILE), "w", encoding="utf-8") as handle:
            json.dump(metadata, handle, indent=1, sort_keys=True, default=str)
        with open(os.path.join(local, MODEL_FILE), "wb") as handle:
            handle.write(booster.save_raw(raw_format="ubj"))
        # model.bst last: its presence means the export is done.
        checkpoints.copy_files(local, destination, (METADATA_FILE, MODEL_FILE))
    logger.info("Exported %s to %s", MODEL_FILE, runtime.join(model_dir, MODEL_FILE))
    return os.path.join(destination, MODEL_FILE)
