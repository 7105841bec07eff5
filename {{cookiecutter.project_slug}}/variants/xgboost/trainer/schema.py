"""YOURS TO CHANGE: how columns become features: text -> category codes, labels -> ``0..K-1``,
agreed by all replicas and saved beside the model so clients encode rows the same way.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from vertex_trainer_runtime.cli import InputError
from vertex_trainer_runtime.xgboost import float_range

logger = logging.getLogger(__name__)

# A text column is encoded as categories only when it has at most this many distinct values
# and (on 20 rows or more) at most one distinct value per two rows; otherwise it is an id or
# free text, which a tree cannot use, and the run stops naming the column.
MAX_CATEGORIES = 256


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


def summarize(frame: pd.DataFrame, label_column: str, kind: str, source: str) -> dict:
    """What one replica's training rows say about the schema (small; replicas exchange it)."""
    if frame.empty:
        raise InputError(f"{source}: no rows")
    columns = [str(column) for column in frame.columns]
    repeated = next((name for name in columns if columns.count(name) > 1), None)
    if repeated is not None:
        raise InputError(f"{source}: column {repeated!r} appears twice: name each column once")
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
    summary = {"columns": columns, "rows": len(frame), "text": text, "source": source}
    summary["labels"] = _label_values(labels, label_column, kind, source)
    return summary


def _label_values(labels: pd.Series, label_column: str, kind: str, source: str) -> list | None:
    """A classifier's distinct labels, sorted (None for regression, whose labels must be
    numbers)."""
    if kind == "regression":
        if not pd.api.types.is_numeric_dtype(labels) or pd.api.types.is_bool_dtype(labels):
            converted = float_range.to_numbers(labels)
            bad = labels[converted.isna()]
            if len(bad):
                raise InputError(
                    f"{source}: regression needs a numeric label column; {label_column!r} has "
                    f"{bad.iloc[0]!r}"
                )
        return None
    values = _sorted_values(labels.unique().tolist())
    if len(values) > MAX_CATEGORIES:
        raise InputError(
            f"{source}: label column {label_column!r} has more than {MAX_CATEGORIES} "
            f"distinct values; use --objective=regression for a numeric target"
        )
    return values


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
            # the files (one source per replica) where the column holds text, and one value
            holders = [summary for summary in summaries if summary["text"].get(column)]
            sources = ", ".join(dict.fromkeys(summary.get("source", "") for summary in holders))
            example = holders[0]["text"][column][0]
            raise InputError(
                f"{sources or 'training data'}: feature column {column!r} holds text "
                f"(e.g. {example!r}), not numbers: {len(values)} distinct values in "
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
    with np.errstate(over="ignore"):  # beyond float32 is inf, refused below: no warning
        for index, column in enumerate(schema.feature_names):
            matrix[:, index] = _encode_column(frame[column], column, schema, source)
    infinite = np.isinf(matrix)  # inf in the data, or beyond float32's range
    if infinite.any():
        row, index = np.argwhere(infinite)[0]
        column = schema.feature_names[index]
        value, what = _plain(frame[column].iloc[row]), f"feature column {column!r}"
        raise float_range.beyond_float32(value, column, what, source) or InputError(
            f"{source}: {what} has the infinite value {value!r}: use finite numbers (an empty"
            " cell is missing)"
        )
    return matrix, _encode_labels(frame[schema.label_column], schema, source)


def _encode_column(series: pd.Series, column: str, schema: Schema, source: str) -> np.ndarray:
    if column in schema.categories:
        codes = {value: code for code, value in enumerate(schema.categories[column])}
        text = series.astype(object).where(series.notna(), None)
        _warn_unseen_categories([str(v) for v in text if v is not None], codes, column, source)
        return np.array(
            [codes.get(str(v), math.nan) if v is not None else math.nan for v in text],
            dtype=np.float32,
        )
    if pd.api.types.is_datetime64_any_dtype(series):
        stamps = pd.to_datetime(series)
        return np.where(stamps.isna(), np.nan, stamps.astype("int64") / 1e9).astype(np.float32)
    if pd.api.types.is_bool_dtype(series) or pd.api.types.is_numeric_dtype(series):
        return series.astype(np.float32).to_numpy()
    numbers = float_range.to_numbers(series)
    bad = series[numbers.isna() & series.notna()]
    if len(bad):
        raise InputError(
            f"{source}: feature column {column!r} is numeric in the training data but has "
            f"{bad.iloc[0]!r} here"
        )
    return numbers.astype(np.float32).to_numpy()


def _warn_unseen_categories(values: list[str], codes: dict, column: str, source: str) -> None:
    """Values the training data never had are missing to the model: say so, once per column
    (a typo or a new category in the eval data would otherwise score silently worse)."""
    unseen = [value for value in values if value not in codes]
    if unseen:
        distinct = sorted(set(unseen))
        shown = ", ".join(map(repr, distinct[:3])) + (", ..." if len(distinct) > 3 else "")
        logger.warning(
            f"{source}: column {column!r} has {len(distinct)} value(s) never seen in training "
            f"({shown}) in {len(unseen)} row(s); the model treats them as missing"
        )


def _encode_labels(labels: pd.Series, schema: Schema, source: str) -> np.ndarray:
    column = schema.label_column
    if labels.isna().any():
        raise InputError(
            f"{source}: label column {column!r} has {int(labels.isna().sum())} empty values"
        )
    if schema.classes is None:
        numbers = float_range.to_numbers(labels)
        if numbers.isna().any():
            bad = labels[numbers.isna()].iloc[0]
            raise InputError(f"{source}: label column {column!r} has non-numeric value {bad!r}")
        with np.errstate(over="ignore"):  # beyond float32 is inf, refused below
            values = numbers.to_numpy(dtype=np.float32)
        if np.isinf(values).any():
            bad, what = _plain(labels[np.isinf(values)].iloc[0]), f"label column {column!r}"
            raise float_range.beyond_float32(bad, column, what, source) or InputError(
                f"{source}: {what} has the infinite value {bad!r}"
            )
        return values
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


def _plain(value):
    """A numpy scalar as the Python value (shown as ``inf``, not ``np.float64(inf)``)."""
    return value.item() if hasattr(value, "item") else value


def _key(value) -> str:
    """Match labels across files: 1, 1.0 and "1" are the same class."""
    value = _plain(value)
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
