"""YOURS TO CHANGE: the label rules: which classes the training data has, and each label's id.

``class_names`` refuses rows without a label, infinite labels and labels that look like typos;
``label_mapper`` maps a stored label (class index, int or str) to the id the model is trained
with.
"""

from __future__ import annotations

import math
from collections import Counter

import datasets
from vertex_trainer_runtime import cli

# A class with at most this many rows, and under RARE_LABEL_SHARE of them, looks like a typo
# (one "x" among thousands of 0/1 labels would train a 3-class model): it is refused unless
# --label-names lists it.
RARE_LABEL_ROWS = 5
RARE_LABEL_SHARE = 0.01


def _label_key(value):
    """Labels as read from files: ints stay ints, integral floats become ints, the rest str."""
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, bool):
        return int(value)
    return value


def class_names(
    dataset: datasets.Dataset, spec: str, column: str, given: list[str] | None = None
) -> list[str]:
    """The classes in id order: ``given`` (``--label-names``), else the sorted label values."""
    feature = dataset.features[column]
    if isinstance(feature, datasets.ClassLabel):
        if given and sorted(given) != sorted(feature.names):
            raise cli.InputError(
                f"{spec}: --label-names {','.join(given)} do not match the dataset's classes"
                f" {','.join(feature.names)}"
            )
        return list(given or feature.names)
    labels = _checked_labels(dataset, spec, column)
    counts = Counter(labels)  # in the order of first appearance
    if given:
        unlisted = next((row for row, v in enumerate(labels) if str(v) not in given), None)
        if unlisted is not None:
            raise cli.InputError(
                f"{spec}: data row {unlisted + 1}: label {str(labels[unlisted])!r} is not one"
                f" of --label-names {','.join(given)}"
            )
        return list(given)
    if len(counts) < 2:
        raise cli.InputError(
            f"{spec}: column {column!r} needs at least 2 classes, got {set(counts)}"
        )
    names = [str(value) for value in sorted(counts, key=lambda v: (isinstance(v, str), v))]
    rare = [
        v for v, n in counts.items() if n <= RARE_LABEL_ROWS and n < RARE_LABEL_SHARE * len(labels)
    ]
    if rare:
        value = min(rare, key=lambda v: counts[v])
        row = labels.index(value)
        raise cli.InputError(
            f"{spec}: data row {row + 1}: label {str(value)!r} occurs in only {counts[value]} of"
            f" {len(labels)} rows, a typo? Fix it, or list the classes to train on all of them:"
            f" --label-names {','.join(names)}"
        )
    return names


def _checked_labels(dataset: datasets.Dataset, spec: str, column: str) -> list:
    """The label column's values; a nested, missing or infinite one is refused by its row."""
    labels = [_label_key(value) for value in dataset[column]]
    nested = next((row for row, v in enumerate(labels) if isinstance(v, list | dict)), None)
    if nested is not None:
        raise cli.InputError(
            f"{spec}: data row {nested + 1}: label {labels[nested]!r} in {column!r} is not a"
            " number or text"
        )
    missing = [row for row, v in enumerate(labels) if v is None or _is_nan(v)]
    if missing:
        raise cli.InputError(
            f"{spec}: {len(missing)} rows have no {column!r} value (the first is data row"
            f" {missing[0] + 1})"
        )
    infinite = next((row for row, v in enumerate(labels) if _is_infinite(v)), None)
    if infinite is not None:
        raise cli.InputError(
            f"{spec}: data row {infinite + 1}: label {labels[infinite]} in {column!r} is not a"
            " finite number"
        )
    return labels


def _is_nan(value) -> bool:
    """NaN is how pandas reads an empty cell of a numeric column: no value."""
    return isinstance(value, float) and math.isnan(value)


def _is_infinite(value) -> bool:
    """A cell ``inf`` or ``1e999``: a value, but no class."""
    return isinstance(value, float) and math.isinf(value)


def label_mapper(label_names: list[str], feature):
    """A function from a label value as stored (class index, int, str) to the model's id."""
    ids = {name: index for index, name in enumerate(label_names)}

    def to_id(value) -> int:
        if isinstance(feature, datasets.ClassLabel):
            return ids[feature.int2str(value)]
        key = _label_key(value)
        if str(key) in ids:
            return ids[str(key)]
        if isinstance(key, int) and label_names == [str(i) for i in range(len(label_names))]:
            raise KeyError(value)
        if isinstance(key, int) and 0 <= key < len(label_names):
            return key  # numeric ids for named classes, e.g. 0/1 against ClassLabel neg/pos
        raise KeyError(value)

    return to_id
