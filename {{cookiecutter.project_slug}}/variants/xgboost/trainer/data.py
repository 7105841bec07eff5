"""Tabular data for XGBoost: CSV or Parquet files, a BigQuery table, or synthetic rows.

A data spec is one of:
- ``synthetic`` (or ``synthetic:<rows>``): generated rows, for smoke tests and ``make train-local``;
- ``bq://project.dataset.table``: a BigQuery table, billed to the explicit project
  (``--project`` or ``CLOUD_ML_PROJECT_ID``), never to a project guessed from credentials;
- comma-separated files, folders or globs of ``.csv``/``.csv.gz``/``.parquet`` files, as local
  paths, ``/gcs/`` paths or ``gs://`` URIs (read through the ``/gcs/`` Cloud Storage FUSE mount).

Each replica of a distributed job reads only its shard: the rows of all files, in file order,
are numbered 0..N-1 and each replica reads one contiguous range of them, so the replicas hold the
same number of training rows (within one) whatever the files; a file may be split between two
replicas. Held-out eval rows (no ``--eval-data``) are chosen by a seeded hash of that global row
number, so they are the same rows for any replica count. The row counts this needs come from
Parquet metadata (no data read) and from one count pass per CSV file. A BigQuery table is
sharded by a hash of each row instead (no row order exists). What the columns mean (``Schema``)
is in ``schema.py``.
"""

from __future__ import annotations

import glob
import gzip
import importlib
import logging
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

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
COUNT_CHUNK_ROWS = 1 << 20  # the CSV count pass reads this many rows at a time
# A CSV file without quotes and carriage returns whose lines start with none of these: every
# line end ends a row and pandas skips no line.
_NEWLINE = ord("\n")
_NOT_A_ROW_START = np.frombuffer(b"\n \t", dtype=np.uint8)


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
    frame, _ = read_rows(
        spec, role, label_column=label_column, kind=kind, shard=shard, seed=seed, project=project
    )
    return frame


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
        return frame, _hashed_rows_held_out(frame, hold_out, seed)
    if spec == SYNTHETIC or spec.startswith(SYNTHETIC + ":"):
        frame = synthetic(spec, role, label_column=label_column, kind=kind, seed=seed)
        plan = _plan(len(frame), hold_out, seed)
        start, stop = plan.range_of(shard)
        return frame.iloc[start:stop].reset_index(drop=True), plan.held_out(start, stop)
    files = list_files(spec)
    if shard.world == 1:  # every row: nothing to count
        frame = _concat([read_file(path) for path in files], spec)
        return frame, _plan(len(frame), hold_out, seed).held_out(0, len(frame))
    counts = [count_rows(path) for path in files]
    plan = _plan(sum(counts), hold_out, seed)
    start, stop = plan.range_of(shard)
    logger.info(
        "%s data: rows %d..%d of %d (in %d files) for replica %d of %d",
        role,
        start,
        stop,
        plan.total,
        len(files),
        shard.rank,
        shard.world,
    )
    return _read_range(files, counts, start, stop, spec), plan.held_out(start, stop)


def _plan(total: int, hold_out: float, seed: int) -> RowPlan:
    if hold_out > 0 and total < 2:
        raise InputError("no --eval-data given and too few training rows to hold some out")
    return RowPlan(total, hold_out, seed)


def count_rows(path: str) -> int:
    """The data rows of one file: Parquet's metadata, or a pass over a CSV file (its first
    column parsed; an unreadable file is an ``InputError`` naming it)."""
    shown = runtime.to_gcs_uri(path)
    if os.path.getsize(path) == 0:
        raise InputError(f"{shown}: the file is empty")
    try:
        if path.lower().endswith(PARQUET_SUFFIXES):
            return pq.ParquetFile(path).metadata.num_rows
        try:
            return _count_csv_lines(path)
        except _NotPlain:
            pass
        chunks = pd.read_csv(path, usecols=[0], dtype=str, chunksize=COUNT_CHUNK_ROWS)
        return sum(len(chunk) for chunk in chunks)
    except pd.errors.EmptyDataError:
        raise InputError(f"{shown}: the file is empty (no header, no rows)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as error:
        raise InputError(
            f"{shown}: cannot read it as {_format(path)}: {_first_line(error)}"
        ) from None


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


def _is_data_file(name: str) -> bool:
    return name.lower().endswith(DATA_SUFFIXES)


def read_file(path: str, rows: tuple[int, int] | None = None) -> pd.DataFrame:
    """One CSV or Parquet file (``rows``: only rows ``first..last`` of it); unreadable or empty
    files are an ``InputError`` naming it."""
    shown = runtime.to_gcs_uri(path)
    if os.path.getsize(path) == 0:
        raise InputError(f"{shown}: the file is empty")
    try:
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
    except pd.errors.EmptyDataError:
        raise InputError(f"{shown}: the file is empty (no header, no rows)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as error:
        raise InputError(
            f"{shown}: cannot read it as {_format(path)}: {_first_line(error)}"
        ) from None
    named = [name for name in header if isinstance(name, str)]  # an empty cell is NaN
    repeated = next((name for name in named if named.count(name) > 1), None)
    if repeated is not None:
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


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


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


class RowPlan:
    """Which global rows each replica reads and which are held out for evaluation.

    Row ``i`` is held out when a seeded hash of ``i`` falls below ``hold_out`` (if that holds
    out no row, the row of the smallest hash is; if all, the row of the largest stays), so the
    eval rows depend on the data, ``--seed`` and ``--eval-fraction`` only. The replicas' ranges
    split the other rows evenly. The hashes are computed in chunks: memory stays small and two
    passes over N row numbers cost about 20 ms per million rows.
    """

    def __init__(self, total: int, hold_out: float, seed: int):
        self.total = total
        self.hold_out = hold_out
        self.seed = seed
        self.forced_in: int | None = None  # a row held out although its hash is not below
        self.forced_out: int | None = None  # a row kept for training although its hash is below
        self.held_out_rows = 0
        if hold_out <= 0 or total == 0:
            return
        lowest, highest = (np.inf, -1), (-np.inf, -1)
        for start, stop in self._chunks(0, total):
            draws = self._draws(start, stop)
            self.held_out_rows += int((draws < hold_out).sum())
            low, high = int(draws.argmin()), int(draws.argmax())
            lowest = min(lowest, (draws[low], start + low))
            highest = max(highest, (draws[high], start + high))
        if self.held_out_rows == 0:
            self.forced_in, self.held_out_rows = lowest[1], 1
        elif self.held_out_rows == total and total > 1:
            self.forced_out, self.held_out_rows = highest[1], total - 1

    @staticmethod
    def _chunks(start: int, stop: int, size: int = 1 << 20):
        for first in range(start, stop, size):
            yield first, min(stop, first + size)

    def _draws(self, start: int, stop: int) -> np.ndarray:
        """A uniform number in [0, 1) per row ``start..stop``, from the row number and seed."""
        return _splitmix64(np.arange(start, stop, dtype=np.uint64), self.seed) / 2.0**64

    def held_out(self, start: int, stop: int) -> np.ndarray:
        """Whether each row ``start..stop`` is held out."""
        mask = np.zeros(stop - start, dtype=bool)
        if self.hold_out <= 0:
            return mask
        mask[:] = self._draws(start, stop) < self.hold_out
        for row, value in ((self.forced_in, True), (self.forced_out, False)):
            if row is not None and start <= row < stop:
                mask[row - start] = value
        return mask

    def range_of(self, shard: Shard) -> tuple[int, int]:
        """The global rows ``start..stop`` replica ``shard.rank`` reads."""
        return self._boundary(shard.rank, shard.world), self._boundary(shard.rank + 1, shard.world)

    def _boundary(self, rank: int, world: int) -> int:
        """The row where replica ``rank``'s range starts: its first training row."""
        if rank == 0:
            return 0
        if rank == world:
            return self.total
        training = self.total - self.held_out_rows
        wanted = rank * training // world  # training rows before this replica's range
        if self.hold_out <= 0:
            return wanted
        seen = 0
        for start, stop in self._chunks(0, self.total):
            kept = np.flatnonzero(~self.held_out(start, stop))
            if seen + len(kept) > wanted:
                return start + int(kept[wanted - seen])
            seen += len(kept)
        return self.total


def _splitmix64(values: np.ndarray, seed: int) -> np.ndarray:
    """SplitMix64's output function of ``values + seed``: a fixed, well-mixed 64-bit hash."""
    with np.errstate(over="ignore"):
        mixed = values + np.uint64(seed % 2**64) * np.uint64(0x9E3779B97F4A7C15)
        mixed = (mixed ^ (mixed >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        mixed = (mixed ^ (mixed >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return mixed ^ (mixed >> np.uint64(31))


def _hashed_rows_held_out(frame: pd.DataFrame, hold_out: float, seed: int) -> np.ndarray:
    """Held-out rows of a source without row numbers (BigQuery): a seeded hash of each row's
    values decides, so again the same rows for any replica count."""
    if hold_out <= 0 or frame.empty:
        return np.zeros(len(frame), dtype=bool)
    hashes = pd.util.hash_pandas_object(frame, index=False).to_numpy(dtype=np.uint64)
    return _splitmix64(hashes, seed) / 2.0**64 < hold_out


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
