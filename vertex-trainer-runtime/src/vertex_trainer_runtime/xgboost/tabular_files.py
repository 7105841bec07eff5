"""Reading CSV and Parquet files: listing them, counting their rows, reading this replica's rows.
The runtime's (``vertex_trainer_runtime.xgboost``); another source (a format, a database) is
added in the trainer's ``data.py``.

Row counts come from Parquet metadata or a plain CSV file's line ends (pandas counts a CSV file
with quotes, carriage returns or blank lines); a range is read from the Parquet row groups or the
CSV byte that holds it.
"""

from __future__ import annotations

import csv
import glob
import gzip
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from vertex_trainer_runtime import runtime
from vertex_trainer_runtime.cli import InputError
from vertex_trainer_runtime.xgboost import row_plan

logger = logging.getLogger(__name__)

PARQUET_SUFFIXES = (".parquet", ".pq")
DATA_SUFFIXES = (".csv", ".csv.gz") + PARQUET_SUFFIXES
COUNT_CHUNK_ROWS = 1 << 20  # the CSV count pass reads this many rows at a time
# A CSV file without quotes and carriage returns whose lines start with none of these: every
# line end ends a row and pandas skips no line.
_NEWLINE = ord("\n")
_NOT_A_ROW_START = np.frombuffer(b"\n \t", dtype=np.uint8)


def read_rows(
    spec: str, role: str, rank: int = 0, world: int = 1, hold_out: float = 0.0, seed: int = 42
) -> tuple[pd.DataFrame, np.ndarray]:
    """Replica ``rank`` of ``world``'s rows of the files ``spec`` names (one contiguous range of
    all their rows, in file order) and which of them are held out for evaluation: ``hold_out``
    of all rows, chosen by ``seed`` (``row_plan``: the same rows for any replica count)."""
    files = list_files(spec)
    if world == 1:  # every row: nothing to count
        frame = _concat([read_file(path) for path in files], spec)
        return frame, row_plan.plan(len(frame), hold_out, seed).held_out(0, len(frame))
    counts = [count_rows(path) for path in files]
    plan = row_plan.plan(sum(counts), hold_out, seed)
    start, stop = plan.range_of(rank, world)
    logger.info(
        f"{role} data: rows {start}..{stop} of {plan.total} (in {len(files)} files) for replica "
        f"{rank} of {world}"
    )
    return _read_range(files, counts, start, stop, spec), plan.held_out(start, stop)


def count_rows(path: str) -> int:
    """The data rows of one file: Parquet's metadata, or a pass over a CSV file (its first
    column parsed; an unreadable file is an ``InputError`` naming it)."""
    with _reading(path):
        if path.lower().endswith(PARQUET_SUFFIXES):
            return pq.ParquetFile(path).metadata.num_rows
        try:
            return _count_csv_lines(path)
        except _NotPlain:
            pass
        chunks = pd.read_csv(path, usecols=[0], dtype=str, chunksize=COUNT_CHUNK_ROWS)
        return sum(len(chunk) for chunk in chunks)


@contextmanager
def _reading(path: str) -> Iterator[None]:
    """Turn an empty or unreadable file into an ``InputError`` naming it."""
    shown = runtime.to_gcs_uri(path)
    if os.path.getsize(path) == 0:
        raise InputError(f"{shown}: the file is empty")
    try:
        yield
    except pd.errors.EmptyDataError:
        raise InputError(f"{shown}: the file is empty (no header, no rows)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as error:
        text = str(error).strip()
        first_line = text.splitlines()[0] if text else type(error).__name__
        kind = "Parquet" if path.lower().endswith(PARQUET_SUFFIXES) else "CSV"
        raise InputError(f"{shown}: cannot read it as {kind}: {first_line}") from None


def _count_csv_lines(path: str) -> int:
    """The rows of a plain CSV file by counting its line ends (a fraction of the time of a
    parse); raises ``_NotPlain`` where a line end may not end a row: quotes (a quoted field can
    hold one), carriage returns, blank lines or lines starting with a blank (pandas may skip
    those), and pandas counts such files instead."""
    lines, last = 0, b"\n"
    with _open(path) as handle:
        for chunk, ends in _plain_chunks(handle):
            lines += len(ends)
            last = chunk[-1:]
    return max(0, lines - (last == b"\n"))  # less the header; the last line may lack its end


def _line_offset(path: str, line: int) -> int | None:
    """Where line ``line`` (0: the header) of a plain CSV file starts (None: past its end)."""
    seen, offset = 0, 0
    with _open(path) as handle:
        for chunk, ends in _plain_chunks(handle):
            if seen + len(ends) >= line:
                return offset + int(ends[line - seen - 1]) + 1
            seen, offset = seen + len(ends), offset + len(chunk)
    return None


def _open(path: str):
    return gzip.open(path, "rb") if path.lower().endswith(".gz") else open(path, "rb")


def _plain_chunks(handle, size: int = 1 << 24):
    """(chunk, positions of its line ends) for the bytes of ``handle``; raises ``_NotPlain``
    at anything but plain lines."""
    previous = b"\n"
    while chunk := handle.read(size):
        if b'"' in chunk or b"\r" in chunk:
            raise _NotPlain
        data = np.frombuffer(chunk, dtype=np.uint8)
        ends = np.flatnonzero(data == _NEWLINE)
        starts = data[ends[ends + 1 < len(data)] + 1]  # the first byte of each next line
        if np.isin(starts, _NOT_A_ROW_START).any() or (
            previous == b"\n" and data[0] in _NOT_A_ROW_START
        ):
            raise _NotPlain
        yield chunk, ends
        previous = chunk[-1:]


class _NotPlain(Exception):
    """A CSV file whose line ends may not be its row ends."""


def _read_range(files: list[str], counts: list[int], start: int, stop: int, spec: str):
    """Rows ``start..stop`` (global numbers) of ``files``, whose row counts are ``counts``."""
    frames, offset = [], 0
    for path, count in zip(files, counts, strict=True):
        first, last = max(start, offset), min(stop, offset + count)
        if first < last:
            whole = first == offset and last == offset + count
            rows = None if whole else (first - offset, last - offset)
            frames.append(read_file(path, rows))
        offset += count
    if not frames:  # no rows for this replica: the columns still matter (and "no rows" errors)
        frames = [read_file(files[0], (0, 0))]
    return _concat(frames, spec)


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


def first_cell(
    spec: str, column: str, predicate: Callable[[str], bool]
) -> tuple[str, int, str] | None:
    """(file, line, text) of the first cell of ``column`` in the CSV files of ``spec`` whose text
    ``predicate`` accepts, or None (no such cell, Parquet files, not files). For an error
    message: pandas has turned a text such as ``1e999`` into ``inf``, which the user never wrote.
    Lines are the file's lines (the header is line 1)."""
    try:
        files = list_files(spec)
    except InputError:
        return None
    for path in files:
        if path.lower().endswith(PARQUET_SUFFIXES):
            continue
        try:
            found = _first_cell_of_file(path, column, predicate)
        except (csv.Error, OSError):  # a field past csv's size limit, a broken .gz file
            continue
        if found is not None:
            return (runtime.to_gcs_uri(path), *found)
    return None


def _first_cell_of_file(path: str, column: str, predicate) -> tuple[int, str] | None:
    opened = gzip.open if path.lower().endswith(".gz") else open
    with opened(path, "rt", encoding="utf-8-sig", errors="replace", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, [])
        if column not in header:
            return None
        index, row_start = header.index(column), reader.line_num + 1
        for row in reader:
            if index < len(row) and predicate(row[index]):
                return row_start, row[index]
            row_start = reader.line_num + 1
    return None


def _is_data_file(name: str) -> bool:
    return name.lower().endswith(DATA_SUFFIXES)


def read_file(path: str, rows: tuple[int, int] | None = None) -> pd.DataFrame:
    """One CSV or Parquet file (``rows``: only rows ``first..last`` of it); unreadable or empty
    files are an ``InputError`` naming it."""
    with _reading(path):
        if path.lower().endswith(PARQUET_SUFFIXES):
            return _read_parquet(path, rows)
        # pandas renames a repeated column (f1, f1 -> f1, f1.1): read the header as it is.
        header = pd.read_csv(path, header=None, nrows=1, dtype=str).iloc[0].tolist()
        if rows is None:
            frame = pd.read_csv(path)
        elif rows[0] == 0:
            frame = pd.read_csv(path, nrows=rows[1])
        else:
            # Skipping by a count (the header and the rows before) is quote-aware and far
            # cheaper than a list of rows to skip; the names are those pandas gives the header.
            first, last = rows
            names = list(pd.read_csv(path, nrows=0).columns)
            frame = _read_csv_rows(path, first, last - first, names)
    named = [name for name in header if isinstance(name, str)]  # an empty cell is NaN
    repeated = next((name for name in named if named.count(name) > 1), None)
    if repeated is not None:
        shown = runtime.to_gcs_uri(path)
        raise InputError(f"{shown}: column {repeated!r} appears twice in the header")
    return frame


def _read_csv_rows(path: str, first: int, count: int, names: list) -> pd.DataFrame:
    """Rows ``first..first+count`` of a CSV file: a plain file from the byte where they start,
    any other by pandas skipping lines (quote-aware, and several times slower)."""
    try:
        offset = _line_offset(path, first + 1)
    except _NotPlain:
        offset = None
    if offset is None:
        return pd.read_csv(path, skiprows=first + 1, nrows=count, header=None, names=names)
    with _open(path) as handle:
        handle.seek(offset)
        return pd.read_csv(handle, nrows=count, header=None, names=names)


def _read_parquet(path: str, rows: tuple[int, int] | None) -> pd.DataFrame:
    """A Parquet file, or rows ``first..last`` of it: only the row groups that hold them."""
    if rows is None:
        return pd.read_parquet(path)
    first, last = rows
    parquet = pq.ParquetFile(path)
    groups, offset, skipped = [], 0, None
    for index in range(parquet.metadata.num_row_groups):
        count = parquet.metadata.row_group(index).num_rows
        if offset < last and offset + count > first:
            groups.append(index)
            skipped = offset if skipped is None else skipped
        offset += count
    if not groups:
        return parquet.schema_arrow.empty_table().to_pandas()
    frame = parquet.read_row_groups(groups, use_pandas_metadata=True).to_pandas()
    return frame.iloc[first - skipped : last - skipped].reset_index(drop=True)


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
