"""Tabular data for XGBoost: CSV or Parquet files, a BigQuery table, or synthetic rows.

A data spec is one of:
- ``synthetic`` (or ``synthetic:<rows>``): generated rows, for smoke tests and ``make train-local``;
- ``bq://project.dataset.table``: a BigQuery table, billed to the explicit project
  (``--project`` or ``CLOUD_ML_PROJECT_ID``), never to a project guessed from credentials;
- comma-separated files, folders or globs of ``.csv``/``.csv.gz``/``.parquet`` files, as local
  paths, ``/gcs/`` paths or ``gs://`` URIs (read through the ``/gcs/`` Cloud Storage FUSE mount).

Each replica of a distributed job reads only its shard: every ``world``-th file, or every
``world``-th row when there are fewer files than replicas. What the columns mean (``Schema``)
is in ``schema.py``.
"""

from __future__ import annotations

import glob
import importlib
import logging
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from trainer import runtime
from trainer.cli import InputError

logger = logging.getLogger(__name__)

SYNTHETIC = "synthetic"
BIGQUERY_PREFIX = "bq://"
PARQUET_SUFFIXES = (".parquet", ".pq")
DATA_SUFFIXES = (".csv", ".csv.gz") + PARQUET_SUFFIXES
SYNTHETIC_ROWS = {"train": 4000, "eval": 1000}
SYNTHETIC_FEATURES = 8
SYNTHETIC_COLORS = ("red", "green", "blue", "yellow")


@dataclass(frozen=True)
class Shard:
    """This replica's part of the data: rank ``rank`` of ``world`` replicas."""

    rank: int = 0
    world: int = 1


# --- reading ---------------------------------------------------------------------------------


def read(
    spec: str,
    role: str,
    *,
    label_column: str,
    kind: str,
    shard: Shard = Shard(),
    seed: int = 42,
    project: str | None = None,
) -> pd.DataFrame:
    """This replica's rows of ``spec`` as a DataFrame (``role`` is "train" or "eval")."""
    spec = spec.strip()
    if not spec:
        raise InputError(f"--{role}-data is empty")
    if spec == SYNTHETIC or spec.startswith(SYNTHETIC + ":"):
        frame = synthetic(spec, role, label_column=label_column, kind=kind, seed=seed)
        return _rows_of_shard(frame, shard)
    if spec.startswith(BIGQUERY_PREFIX):
        return read_bigquery(spec, project=project, shard=shard)
    files = list_files(spec)
    if len(files) >= shard.world:
        mine = files[shard.rank :: shard.world]
        logger.info(
            "%s data: %d of %d files for replica %d", role, len(mine), len(files), shard.rank
        )
        return _concat([read_file(path) for path in mine], spec)
    frame = _concat([read_file(path) for path in files], spec)
    return _rows_of_shard(frame, shard)


def list_files(spec: str) -> list[str]:
    """The data files named by comma-separated files, folders or globs, sorted."""
    files: list[str] = []
    for part in (item.strip() for item in spec.split(",")):
        if not part:
            continue
        try:
            path = runtime.local_path(part)
        except RuntimeError as error:
            raise InputError(str(error)) from None
        if glob.has_magic(path):
            matches = sorted(glob.glob(path, recursive=True))
            found = [m for m in matches if os.path.isfile(m) and _is_data_file(m)]
        elif os.path.isdir(path):
            found = sorted(
                os.path.join(directory, name)
                for directory, _, names in os.walk(path)
                for name in names
                if _is_data_file(name) and not name.startswith((".", "_"))
            )
        elif os.path.isfile(path):
            found = [path]
        else:
            raise InputError(f"{part}: no such file or folder")
        if not found:
            raise InputError(f"{part}: no CSV or Parquet files ({', '.join(DATA_SUFFIXES)}) found")
        files.extend(found)
    if not files:
        raise InputError(f"{spec!r}: no data files given")
    return files


def _is_data_file(name: str) -> bool:
    return name.lower().endswith(DATA_SUFFIXES)


def read_file(path: str) -> pd.DataFrame:
    """One CSV or Parquet file; unreadable or empty files are an ``InputError`` naming it."""
    shown = runtime.to_gcs_uri(path)
    if os.path.getsize(path) == 0:
        raise InputError(f"{shown}: the file is empty")
    try:
        if path.lower().endswith(PARQUET_SUFFIXES):
            return pd.read_parquet(path)
        # pandas renames a repeated column (f1, f1 -> f1, f1.1): read the header as it is.
        header = pd.read_csv(path, header=None, nrows=1, dtype=str).iloc[0].tolist()
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise InputError(f"{shown}: the file is empty (no header, no rows)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InputError(f"{shown}: cannot read it as {_format(path)}: {message}") from None
    named = [name for name in header if isinstance(name, str)]  # an empty cell is NaN
    repeated = next((name for name in named if named.count(name) > 1), None)
    if repeated is not None:
        raise InputError(f"{shown}: column {repeated!r} appears twice in the header")
    return frame


def _format(path: str) -> str:
    return "Parquet" if path.lower().endswith(PARQUET_SUFFIXES) else "CSV"


def _concat(frames: list[pd.DataFrame], spec: str) -> pd.DataFrame:
    if not frames:
        return pd.DataFrame()
    columns = list(frames[0].columns)
    for frame in frames[1:]:
        if list(frame.columns) != columns:
            raise InputError(
                f"{spec}: files have different columns ({', '.join(map(str, columns))} vs "
                f"{', '.join(map(str, frame.columns))})"
            )
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def _rows_of_shard(frame: pd.DataFrame, shard: Shard) -> pd.DataFrame:
    if shard.world == 1:
        return frame
    return frame.iloc[shard.rank :: shard.world].reset_index(drop=True)


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


def split_off_eval(frame: pd.DataFrame, fraction: float, seed: int):
    """A seeded random (train, eval) split, for runs without ``--eval-data``."""
    if len(frame) < 2 or fraction <= 0:
        raise InputError("no --eval-data given and too few training rows to hold some out")
    order = np.random.default_rng(seed).permutation(len(frame))
    held_out = max(1, min(len(frame) - 1, int(round(len(frame) * fraction))))
    return (
        frame.iloc[np.sort(order[held_out:])].reset_index(drop=True),
        frame.iloc[np.sort(order[:held_out])].reset_index(drop=True),
    )
