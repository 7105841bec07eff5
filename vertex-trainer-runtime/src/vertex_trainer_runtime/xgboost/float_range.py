"""Numbers past float32, as XGBoost reads every feature and label: refused with what the user
wrote. pandas reads ``1e999`` as inf, a text the file does not have, and keeps a 400-digit
integer as a Python int; ``1e39`` is finite but past float32. The trainer's ``schema.py`` asks
here once it found an infinite value.
"""

from __future__ import annotations

import math
import sys

import pandas as pd

from vertex_trainer_runtime.cli import InputError
from vertex_trainer_runtime.xgboost import tabular_files

# How the trainer names the held-out rows of ``--train-data`` (the source of their errors).
HELD_OUT_SUFFIX = " (held-out rows)"


def beyond_float32(value, column: str, what: str, source: str) -> InputError | None:
    """The error for a cell that is infinite as float32, showing what the user wrote: pandas
    reads 1e999 as inf, a text the file does not have, and 1e39 is finite but past float32.
    None where the user wrote an infinity (inf, -Infinity, or Parquet's inf: no text)."""
    text, location = None, ""  # a finite float is shown as it is (1e+39)
    if isinstance(value, float) and math.isinf(value):
        found = tabular_files.first_cell(
            source.removesuffix(HELD_OUT_SUFFIX), column, lambda cell: _parses_to(cell, value)
        )
        if found is None:
            return None
        path, line, text = found
        text, location = text.strip(), f"; the first is line {line} of {path}"
    elif not isinstance(value, float):  # text, or a Python int past float64
        text = str(value).strip()
    if text is not None and text.lstrip("+-").lower() in ("inf", "infinity"):
        return None
    shown = repr(value) if text is None else repr(_start_of(text))
    return InputError(
        f"{source}: {what}: {shown} is beyond the float range (XGBoost reads float32, at most"
        f" ±3.4e38){location}"
    )


def to_numbers(series: pd.Series) -> pd.Series:
    """Numbers, NaN for text. pandas keeps an integer past float64 (400 digits) as a Python int,
    which ``pd.to_numeric`` refuses with OverflowError: it becomes inf, as a long float does."""
    try:
        return pd.to_numeric(series, errors="coerce")
    except OverflowError:
        return pd.to_numeric(series.map(_int_as_float), errors="coerce")


def _int_as_float(value):
    if isinstance(value, int):
        if abs(value) > sys.float_info.max:
            return math.inf if value > 0 else -math.inf
        return float(value)
    return value


def _parses_to(text: str, value: float) -> bool:
    try:
        return float(text) == value
    except ValueError:
        return False


def _start_of(text: str, length: int = 20) -> str:
    """A long cell (a 400-digit number) shown by its start."""
    return text if len(text) <= length else text[:length] + "..."
