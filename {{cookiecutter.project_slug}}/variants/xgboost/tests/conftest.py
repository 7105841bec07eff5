"""Helpers for the XGBoost tests: tiny bundled data sets as files, trainer runs, the model."""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from pathlib import Path

import pandas as pd
import pytest
import xgboost as xgb
from sklearn import datasets, metrics
from sklearn.model_selection import train_test_split
from vertex_trainer_tools import trainer_runs
from vertex_trainer_tools.testing import read_metrics, without_vertex

PROJECT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 150
# One thread per trainer: pytest -n 2 already keeps both cores busy, and XGBoost's OpenMP
# threads slow down badly when they outnumber the free cores.
FAST = ["--nthread=1"]
# A training run of a few seconds on built-in data, also in the image (tests/test_hpt_contract.py,
# tests/test_docker_image.py).
SMOKE_ARGS = ["--train-data=synthetic:500", "--eval-data=synthetic:200", "--num-boost-round=20"]
SMOKE_ARGS += ["--report-rounds=10", *FAST]

# Sampled rows and columns (--subsample, --colsample-bytree), checkpoints every 4 rounds.
SAMPLED = ["--train-data=synthetic:600", "--eval-data=synthetic:200", "--eta=0.3", "--max-depth=4"]
SAMPLED += ["--checkpoint-rounds=4", "--subsample=0.6", "--colsample-bytree=0.7", *FAST]

# The trainers started here import the packages the image has: scikit-learn (the tests' own
# dependency, which XGBoost imports whenever it is installed) cannot be imported from them.
IMAGE_PACKAGES = {
    "PYTHONPATH": os.pathsep.join(
        filter(None, [str(Path(__file__).parent / "image_packages"), os.environ.get("PYTHONPATH")])
    )
}


def trainer_env(**extra: str) -> dict[str, str]:
    """This environment without any Vertex variables of the caller, plus ``extra``."""
    return without_vertex(PYTHONUNBUFFERED="1", **IMAGE_PACKAGES, **extra)


@pytest.fixture
def local_job(local_job):
    """The tools' ``local_job`` (and so ``kill_and_resume``, ``hpt_trial``), its replicas
    importing the packages the image has (``IMAGE_PACKAGES``)."""

    def run(output_dir: Path, trainer_args=(), *, env: dict[str, str] | None = None, **options):
        return local_job(output_dir, trainer_args, env={**IMAGE_PACKAGES, **(env or {})}, **options)

    return run


def run_trainer(args: list[str], env: dict[str, str] | None = None):
    """The trainer as a process to its end (failing past ``TIMEOUT_S``), ``trainer_env()``'s."""
    return trainer_runs.run_trainer(args, env or trainer_env(), TIMEOUT_S, PROJECT)


def run_two_replicas(folder: Path, args: list[str], **env: str) -> dict[str, str]:
    """A chief and a worker (``trainer_runs.start_two_replicas``); their logs once both exit 0."""
    processes = trainer_runs.start_two_replicas(folder, args, trainer_env(**env), PROJECT)
    trainer_runs.wait_all(processes, TIMEOUT_S)
    logs = {name: (folder / f"{name}.log").read_text() for name in processes}
    for name, process in processes.items():
        assert process.returncode == 0, f"{name}:\n{logs[name][-3000:]}"
    assert "rank 0 of 2" in logs["chief"] and "rank 1 of 2" in logs["worker"]
    return logs


def synthetic_rows(spec: str) -> xgb.DMatrix:
    """The eval rows of ``spec`` (``synthetic:<rows>``) as the trainer encodes them."""
    from trainer import data
    from trainer import schema as schemas

    frame = data.synthetic(spec, "eval", label_column="label", kind="binary", seed=42)
    schema = schemas.load_schema(frame, "label", "binary", "eval")
    return xgb.DMatrix(schemas.encode(frame, schema, "eval")[0])


def check_ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stderr[-4000:]


def load_model(model_dir: Path) -> tuple[xgb.Booster, dict]:
    booster = xgb.Booster()
    with warnings.catch_warnings():  # "Unknown file format: bst ... UBJSON as a guess": right
        warnings.filterwarnings("ignore", message=".*Unknown file format")
        booster.load_model(str(model_dir / "model.bst"))
    metadata = json.loads((model_dir / "model_metadata.json").read_text())
    return booster, metadata


def features(frame: pd.DataFrame, metadata: dict) -> xgb.DMatrix:
    """Rows encoded the way model_metadata.json says a prediction client must."""
    columns = []
    for name in metadata["feature_names"]:
        column = frame[name]
        if name in metadata["categories"]:
            codes = {value: code for code, value in enumerate(metadata["categories"][name])}
            column = column.astype(str).map(codes)
        columns.append(column.astype("float32").to_numpy())
    return xgb.DMatrix(pd.concat([pd.Series(c) for c in columns], axis=1).to_numpy())


def check_reported_auc_is_the_exported_models(
    job: dict[str, Path], eval_frame: pd.DataFrame, label: str, patience: int
) -> None:
    """The study's last measurement and the metadata hold the exported model's AUC on every
    eval row, and early stopping kept the round with the best AUC, all per scikit-learn.

    ``job``: the run's ``model``, ``checkpoints`` and ``metrics`` paths.
    """
    booster, metadata = load_model(job["model"])
    rows, truth = features(eval_frame, metadata), eval_frame[label].to_numpy()
    exported_auc = metrics.roc_auc_score(truth, booster.predict(rows))
    last = read_metrics(job["metrics"])[-1]
    assert float(last["auc"]) == pytest.approx(exported_auc, abs=1e-6)
    assert metadata["metric"]["value"] == pytest.approx(exported_auc, abs=1e-6)

    # The final checkpoint holds every round trained: the best is the first with the top AUC,
    # the stop came `patience` rounds after it, and the model was cut there.
    full = xgb.Booster()
    newest = max((job["checkpoints"]).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    full.load_model(str(newest / "model.ubj"))
    trained = full.num_boosted_rounds()
    aucs = [metrics.roc_auc_score(truth, full[:k].predict(rows)) for k in range(1, trained + 1)]
    best = metadata["best_iteration"]
    assert aucs[best] == pytest.approx(max(aucs), abs=1e-6)
    assert max(aucs[:best], default=0.0) < aucs[best] - 1e-6
    assert trained == best + 1 + patience
    assert booster.num_boosted_rounds() == best + 1 == metadata["num_boosted_rounds"]
    assert last["global_step"] == str(trained)  # the last line is also at the highest step


def _write_split(frame: pd.DataFrame, folder: Path, label: str, seed: int = 0) -> dict:
    train, test = train_test_split(frame, test_size=0.25, random_state=seed, stratify=frame[label])
    folder.mkdir(parents=True, exist_ok=True)
    train.to_csv(folder / "train.csv", index=False)
    test.to_csv(folder / "test.csv", index=False)
    return {"train": folder / "train.csv", "test": folder / "test.csv", "test_frame": test}


@pytest.fixture(scope="session")
def breast_cancer(tmp_path_factory) -> dict:
    """Binary: scikit-learn's bundled breast cancer table (569 rows, 30 numeric features)."""
    frame = datasets.load_breast_cancer(as_frame=True).frame
    return _write_split(frame, tmp_path_factory.mktemp("breast_cancer"), "target")


@pytest.fixture(scope="session")
def iris(tmp_path_factory) -> dict:
    """Multiclass with text labels: iris, the label being the species name."""
    bunch = datasets.load_iris(as_frame=True)
    frame = bunch.frame.drop(columns="target")
    frame["species"] = [bunch.target_names[i] for i in bunch.target]
    return _write_split(frame, tmp_path_factory.mktemp("iris"), "species")


@pytest.fixture(scope="session")
def diabetes_shards(tmp_path_factory) -> dict:
    """Regression, as two CSV files in a folder (one per replica of a 2-replica job)."""
    frame = datasets.load_diabetes(as_frame=True).frame
    folder = tmp_path_factory.mktemp("diabetes") / "train"
    folder.mkdir()
    half = len(frame) // 2
    frame.iloc[:half].to_csv(folder / "part-0.csv", index=False)
    frame.iloc[half:].to_csv(folder / "part-1.csv", index=False)
    return {"folder": folder, "rows": len(frame), "frame": frame}
