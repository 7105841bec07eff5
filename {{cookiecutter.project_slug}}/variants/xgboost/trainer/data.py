"""Tabular data for XGBoost: CSV or Parquet files, a BigQuery table, or synthetic rows.

A data spec is one of:
- ``synthetic`` (or ``synthetic:<rows>``): generated rows, for smoke tests and ``make train-local``;
- ``bq://project.dataset.table``: a BigQuery table, billed to the explicit project
  (``--project`` or ``CLOUD_ML_PROJECT_ID``), never to a project guessed from credentials;
- comma-separated files, folders or globs of ``.csv``/``.csv.gz``/``.parquet`` files, as local
  paths, ``/gcs/`` paths or ``gs://`` URIs (read through the ``/gcs/`` Cloud Storage FUSE mount).

Each replica of a distributed job reads only its shard: every ``world``-th file, or every
``world``-th row when there are fewer files than replicas. Text columns become ordinal category
codes and class labels become ``0..K-1``; the mapping is the ``Schema``, saved beside the model
so that prediction clients encode their rows the same way.
"""

from __future__ import annotations

import glob
import importlib
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

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
# A text column is encoded as categories only when it has at most this many distinct values
# and (on 20 rows or more) at most one distinct value per two rows; otherwise it is an id or
# free text, which a tree cannot use, and the run stops naming the column.
MAX_CATEGORIES = 256

KINDS = ("binary", "multiclass", "regression")


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
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise InputError(f"{shown}: the file is empty (no header, no rows)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InputError(f"{shown}: cannot read it as {_format(path)}: {message}") from None


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


# --- schema: what the columns mean, agreed by all replicas ------------------------------------


@dataclass
class Schema:
    """Feature order, text-column vocabularies and label classes; saved beside ``model.bst``.

    ``categories[column]`` lists a text column's values; the model sees a value's index in that
    list (unseen values and empty cells are missing). ``classes[i]`` is the label value of
    class ``i`` (``None`` for regression).
    """

    label_column: str
    feature_names: list[str]
    categories: dict[str, list[str]] = field(default_factory=dict)
    classes: list | None = None

    @property
    def num_class(self) -> int:
        return len(self.classes) if self.classes is not None else 0

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(frame: pd.DataFrame, label_column: str, kind: str, source: str) -> dict:
    """What one replica's training rows say about the schema (small; replicas exchange it)."""
    if frame.empty:
        raise InputError(f"{source}: no rows")
    columns = [str(column) for column in frame.columns]
    if len(set(columns)) != len(columns):
        raise InputError(f"{source}: duplicate column names")
    frame = frame.set_axis(columns, axis=1)
    if label_column not in frame.columns:
        shown = ", ".join(columns[:20]) + (", ..." if len(columns) > 20 else "")
        raise InputError(
            f"{source}: label column {label_column!r} not found (columns: {shown}); "
            "set --label-column"
        )
    labels = frame[label_column]
    missing = int(labels.isna().sum())
    if missing:
        raise InputError(f"{source}: label column {label_column!r} has {missing} empty values")
    text: dict[str, list[str]] = {}
    for column in columns:
        if column == label_column:
            continue
        if _is_text(frame[column]):
            values = frame[column].dropna().astype(str).unique()
            text[column] = sorted(values)[: MAX_CATEGORIES + 1]
    summary = {"columns": columns, "rows": len(frame), "text": text}
    if kind == "regression":
        summary["labels"] = None
        if not pd.api.types.is_numeric_dtype(labels) or pd.api.types.is_bool_dtype(labels):
            converted = pd.to_numeric(labels, errors="coerce")
            bad = labels[converted.isna()]
            if len(bad):
                raise InputError(
                    f"{source}: regression needs a numeric label column; {label_column!r} has "
                    f"{bad.iloc[0]!r}"
                )
    else:
        summary["labels"] = _sorted_values(labels.unique().tolist())
        if len(summary["labels"]) > MAX_CATEGORIES:
            raise InputError(
                f"{source}: label column {label_column!r} has more than {MAX_CATEGORIES} "
                f"distinct values; use --objective=regression for a numeric target"
            )
    return summary


def _is_text(series: pd.Series) -> bool:
    return not (
        pd.api.types.is_numeric_dtype(series)
        or pd.api.types.is_bool_dtype(series)
        or pd.api.types.is_datetime64_any_dtype(series)
    )


def _sorted_values(values: Sequence) -> list:
    """Label values as plain Python scalars in a stable order (numbers numerically)."""
    plain = [value.item() if hasattr(value, "item") else value for value in values]
    if all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in plain):
        return sorted(plain)
    return sorted(plain, key=str)


def merge(summaries: list[dict], label_column: str, kind: str) -> Schema:
    """One schema from every replica's summary: same columns, union of values."""
    columns = summaries[0]["columns"]
    for summary in summaries[1:]:
        if summary["columns"] != columns:
            raise InputError(
                "replicas read training files with different columns: "
                f"{', '.join(columns)} vs {', '.join(summary['columns'])}"
            )
    rows = sum(summary["rows"] for summary in summaries)
    features = [column for column in columns if column != label_column]
    if not features:
        raise InputError(f"training data has only the label column {label_column!r}")
    categories: dict[str, list[str]] = {}
    for column in features:
        values = set()
        for summary in summaries:
            values.update(summary["text"].get(column, ()))
        if not any(column in summary["text"] for summary in summaries):
            continue
        if len(values) > MAX_CATEGORIES or (rows >= 20 and len(values) > rows / 2):
            raise InputError(
                f"feature column {column!r} is text with {len(values)} distinct values in "
                f"{rows} rows: too many to encode as categories (at most {MAX_CATEGORIES} and "
                "one per two rows); drop it or convert it to numbers"
            )
        categories[column] = sorted(values)
    classes = None
    if kind != "regression":
        labels = _sorted_values(
            list({value for summary in summaries for value in summary["labels"]})
        )
        classes = _classes(labels, kind, label_column)
    return Schema(label_column, features, categories, classes)


def _classes(labels: list, kind: str, label_column: str) -> list:
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in labels)
    integral = numeric and all(float(v).is_integer() for v in labels)
    if kind == "binary":
        if len(labels) == 1:
            # Nothing to learn, and AUC undefined: the run would export a constant and report NaN.
            raise InputError(
                f"--label-column={label_column}: the label column has one class "
                f"({labels[0]!r}) in all training rows; binary needs two (e.g. rows labelled "
                "0 and 1)"
            )
        if integral and set(labels) <= {0, 1}:
            return [0, 1]
        if len(labels) == 2:
            return labels
        raise InputError(
            f"binary objective needs 2 label values; {label_column!r} has {len(labels)} "
            f"({', '.join(map(str, labels[:5]))}{', ...' if len(labels) > 5 else ''}); "
            "use --objective=multiclass"
        )
    if integral and {int(v) for v in labels} == set(range(len(labels))):
        classes = list(range(len(labels)))  # the labels already are class indices
    else:
        classes = labels
    if len(classes) < 2:
        raise InputError(f"multiclass objective needs 2 or more classes in {label_column!r}")
    return classes


def encode(frame: pd.DataFrame, schema: Schema, source: str) -> tuple[np.ndarray, np.ndarray]:
    """Features as float32 (text -> category code, unknown -> NaN) and labels as numbers."""
    frame = frame.set_axis([str(column) for column in frame.columns], axis=1)
    missing = [column for column in schema.feature_names if column not in frame.columns]
    if missing:
        raise InputError(f"{source}: feature column(s) missing: {', '.join(missing)}")
    if schema.label_column not in frame.columns:
        raise InputError(f"{source}: label column {schema.label_column!r} not found")
    if frame.empty:
        raise InputError(f"{source}: no rows")
    matrix = np.empty((len(frame), len(schema.feature_names)), dtype=np.float32)
    for index, column in enumerate(schema.feature_names):
        matrix[:, index] = _encode_column(frame[column], column, schema, source)
    return matrix, _encode_labels(frame[schema.label_column], schema, source)


def _encode_column(series: pd.Series, column: str, schema: Schema, source: str) -> np.ndarray:
    if column in schema.categories:
        codes = {value: code for code, value in enumerate(schema.categories[column])}
        text = series.astype(object).where(series.notna(), None)
        return np.array(
            [codes.get(str(v), math.nan) if v is not None else math.nan for v in text],
            dtype=np.float32,
        )
    if pd.api.types.is_datetime64_any_dtype(series):
        stamps = pd.to_datetime(series)
        return np.where(stamps.isna(), np.nan, stamps.astype("int64") / 1e9).astype(np.float32)
    if pd.api.types.is_bool_dtype(series) or pd.api.types.is_numeric_dtype(series):
        return series.astype(np.float32).to_numpy()
    numbers = pd.to_numeric(series, errors="coerce")
    bad = series[numbers.isna() & series.notna()]
    if len(bad):
        raise InputError(
            f"{source}: feature column {column!r} is numeric in the training data but has "
            f"{bad.iloc[0]!r} here"
        )
    return numbers.astype(np.float32).to_numpy()


def _encode_labels(labels: pd.Series, schema: Schema, source: str) -> np.ndarray:
    column = schema.label_column
    if labels.isna().any():
        raise InputError(
            f"{source}: label column {column!r} has {int(labels.isna().sum())} empty values"
        )
    if schema.classes is None:
        numbers = pd.to_numeric(labels, errors="coerce")
        if numbers.isna().any():
            bad = labels[numbers.isna()].iloc[0]
            raise InputError(f"{source}: label column {column!r} has non-numeric value {bad!r}")
        return numbers.to_numpy(dtype=np.float32)
    index = {_key(value): code for code, value in enumerate(schema.classes)}
    codes = np.empty(len(labels), dtype=np.float32)
    for row, value in enumerate(labels.tolist()):
        code = index.get(_key(value))
        if code is None:
            raise InputError(
                f"{source}: label {value!r} in column {column!r} is not one of the training "
                f"classes ({', '.join(map(str, schema.classes[:10]))})"
            )
        codes[row] = code
    return codes


def _key(value) -> str:
    """Match labels across files: 1, 1.0 and "1" are the same class."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def load_schema(
    frame: pd.DataFrame,
    label_column: str,
    kind: str,
    source: str,
    gather: Callable[[dict], list[dict]] = lambda summary: [summary],
) -> Schema:
    """The schema of the training data of all replicas (``gather`` exchanges summaries)."""
    return merge(gather(summarize(frame, label_column, kind, source)), label_column, kind)
