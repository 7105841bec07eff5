"""YOURS TO CHANGE: where the rows come from: CSV or Parquet files, a BigQuery table, or synthetic
rows (``--train-data``/``--eval-data``, docs/trainer.md "Data"). Add a source in ``read_rows``.

Each replica reads one contiguous range of the rows of all files (a hashed share of a BigQuery
table); held-out eval rows are chosen by a seeded hash of the row number, the same rows for any
replica count. The runtime lists, counts and reads the files and numbers the rows
(``vertex_trainer_runtime.xgboost.tabular_files`` and ``row_plan``).
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd
from vertex_trainer_runtime.cli import InputError
from vertex_trainer_runtime.xgboost import row_plan, tabular_files

logger = logging.getLogger(__name__)

SYNTHETIC = "synthetic"
BIGQUERY_PREFIX = "bq://"
SYNTHETIC_ROWS = {"train": 4000, "eval": 1000}
SYNTHETIC_FEATURES = 8
SYNTHETIC_COLORS = ("red", "green", "blue", "yellow")


@dataclass(frozen=True)
class Shard:
    """This replica's part of the data: rank ``rank`` of ``world`` replicas."""

    rank: int = 0
    world: int = 1


# --- reading ---------------------------------------------------------------------------------


def read(spec: str, role: str, **options) -> pd.DataFrame:
    """This replica's rows of ``spec`` (``role``: "train" or "eval"; ``options``: read_rows')."""
    return read_rows(spec, role, **options)[0]


def read_rows(
    spec: str,
    role: str,
    *,
    label_column: str,
    kind: str,
    shard: Shard = Shard(),
    seed: int = 42,
    project: str | None = None,
    hold_out: float = 0.0,
) -> tuple[pd.DataFrame, np.ndarray]:
    """This replica's rows of ``spec`` and which of them are held out for evaluation.

    ``hold_out``: the share of all rows held out (0: none), chosen by ``seed`` from the rows'
    global numbers, so the same rows whatever the replica count; the replicas' ranges hold the
    same number of the other, training rows (within one).
    """
    spec = spec.strip()
    if not spec:
        raise InputError(f"--{role}-data is empty")
    if spec.startswith(BIGQUERY_PREFIX):
        frame = read_bigquery(spec, project=project, shard=shard)
        return frame, row_plan.hashed_rows_held_out(frame, hold_out, seed)
    if spec == SYNTHETIC or spec.startswith(SYNTHETIC + ":"):
        frame = synthetic(spec, role, label_column=label_column, kind=kind, seed=seed)
        plan = row_plan.plan(len(frame), hold_out, seed)
        start, stop = plan.range_of(shard.rank, shard.world)
        return frame.iloc[start:stop].reset_index(drop=True), plan.held_out(start, stop)
    return tabular_files.read_rows(spec, role, shard.rank, shard.world, hold_out, seed)


def read_bigquery(spec: str, *, project: str | None, shard: Shard = Shard()) -> pd.DataFrame:
    """A BigQuery table via the BigQuery client, billed to the explicit ``project``.

    Vertex runs the container in a Google-managed tenant project, so the client gets the
    project from ``--project`` or ``CLOUD_ML_PROJECT_ID``. A distributed job reads one
    fingerprint-hashed shard of the rows per replica.
    """
    table = spec[len(BIGQUERY_PREFIX) :].strip().strip("/")
    parts = table.split(".")
    if len(parts) not in (2, 3) or not all(parts):
        raise InputError(f"{spec}: expected bq://project.dataset.table")
    try:
        bigquery = importlib.import_module("google.cloud.bigquery")
    except ImportError:
        raise InputError(
            f"{spec}: reading BigQuery needs google-cloud-bigquery; add "
            "'google-cloud-bigquery[pandas]' to requirements.txt (or pip install it)"
        ) from None
    # Vertex sets the launching project's number on every replica.
    project = project or os.environ.get("CLOUD_ML_PROJECT_ID")
    if not project:
        raise InputError(
            f"{spec}: BigQuery needs a project to bill the read to: pass --project "
            "(on Vertex AI, CLOUD_ML_PROJECT_ID is used)"
        )
    if len(parts) == 2:
        table = f"{project}.{table}"
    client = bigquery.Client(project=project)
    logger.info("Reading BigQuery table %s (billed to project %s)", table, project)
    if shard.world == 1:
        frame = client.list_rows(table).to_dataframe()
    else:
        query = (
            f"SELECT * FROM `{table}` AS t WHERE "
            f"MOD(ABS(FARM_FINGERPRINT(TO_JSON_STRING(t))), {shard.world}) = {shard.rank}"
        )
        frame = client.query(query).to_dataframe()
    return frame


def synthetic(spec: str, role: str, *, label_column: str, kind: str, seed: int) -> pd.DataFrame:
    """Generated rows with one learnable concept shared by train and eval, and a text column.

    ``synthetic:<rows>`` sets the row count. Train and eval draw different rows (the seed is
    offset by role) from the same fixed function, so held-out scores mean something.
    """
    rows = SYNTHETIC_ROWS.get(role, SYNTHETIC_ROWS["eval"])
    if ":" in spec:
        _, _, count = spec.partition(":")
        try:
            rows = int(count)
        except ValueError:
            rows = 0
        if rows < 1:
            raise InputError(f"{spec}: expected synthetic:<rows> with rows >= 1")
    concept = np.random.default_rng(20240611)  # fixed: the same concept for every role and seed
    weights = concept.normal(size=SYNTHETIC_FEATURES)
    color_effect = concept.normal(size=len(SYNTHETIC_COLORS))
    rng = np.random.default_rng([seed, 0 if role == "train" else 1])
    features = rng.normal(size=(rows, SYNTHETIC_FEATURES)).astype(np.float32)
    colors = rng.integers(0, len(SYNTHETIC_COLORS), size=rows)
    signal = (
        features @ weights
        + 1.5 * np.sin(2 * features[:, 0])
        + features[:, 1] * features[:, 2]
        + color_effect[colors]
    )
    noisy = signal + rng.normal(scale=0.3, size=rows)
    frame = pd.DataFrame(features, columns=[f"x{i}" for i in range(SYNTHETIC_FEATURES)])
    frame["color"] = np.asarray(SYNTHETIC_COLORS)[colors]
    if kind == "binary":
        frame[label_column] = (noisy > 0).astype(np.int64)
    elif kind == "multiclass":
        edges = np.quantile(signal, [1 / 3, 2 / 3])  # three balanced classes
        frame[label_column] = np.digitize(noisy, edges).astype(np.int64)
    else:
        frame[label_column] = noisy.astype(np.float64)
    return frame


def split_held_out(frame: pd.DataFrame, held_out: np.ndarray):
    """(training rows, held-out eval rows) of ``frame``, for runs without ``--eval-data``."""
    return frame[~held_out].reset_index(drop=True), frame[held_out].reset_index(drop=True)


def evaluation_rows(frame: pd.DataFrame, group) -> pd.DataFrame:
    """The eval rows of all replicas, on every replica (rank order).

    XGBoost's distributed AUC/AUCPR is a mean of each replica's own area weighted by its
    positive x negative pairs (src/metric/auc.cc), not the eval set's: skewed when the replicas'
    eval rows differ. With the same rows everywhere it is exact, as is every summed metric.
    """
    if not group.distributed:
        return frame
    return pd.concat(group.allgather(frame), ignore_index=True)
