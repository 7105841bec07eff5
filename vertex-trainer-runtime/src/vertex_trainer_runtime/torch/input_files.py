"""Data files as ``datasets`` tables: CSV, JSON Lines or Parquet (a file, a folder or a glob;
local, ``/gcs/`` or ``gs://``), checked first.

Non-UTF-8 text, binary files, header-only files, repeated column names and CSV rows with more
fields than the header are refused with one line naming the file and line. The trainer's
``data.py`` reads ``--train-data``/``--eval-data`` here, its ``predict.py`` the ``--input-file``
tables.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import glob
import logging
import os

import datasets
import pyarrow.parquet as pq

from vertex_trainer_runtime import cli, runtime

_BUILDERS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
_READ_CHUNK = 1 << 20


def data_files(spec: str) -> list[str]:
    """The files a ``--*-data`` value names: a file, a folder of files, or a glob."""
    try:
        path = runtime.local_path(spec)
    except RuntimeError as error:
        raise cli.InputError(str(error)) from None
    if os.path.isdir(path):
        files = [
            os.path.join(path, name)
            for name in sorted(os.listdir(path))
            if os.path.splitext(name)[1].lower() in _BUILDERS
        ]
    else:
        files = sorted(glob.glob(path))
    if not files:
        raise cli.InputError(f"{spec}: no such file (expected CSV, JSON Lines or Parquet data)")
    return files


def check_text_file(path: str, header: bool) -> bool:
    """InputError unless the file is UTF-8 text: names the file and the line of the first
    undecodable byte (a latin-1 export, a binary file with a .csv name). Returns whether it
    has rows (a line after the ``header`` line, if it has one)."""
    shown = runtime.to_gcs_uri(path)
    decoder = codecs.getincrementaldecoder("utf-8")()
    line, has_rows, in_header = 1, False, header
    with open(path, "rb") as handle:
        while chunk := handle.read(_READ_CHUNK):
            if line == 1 and chunk.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
                raise cli.InputError(f"{shown}: line 1: UTF-16 text: save the file as UTF-8")
            if b"\x00" in chunk:
                line += chunk[: chunk.index(b"\x00")].count(b"\n")
                raise cli.InputError(
                    f"{shown}: line {line}: a NUL byte: this is a binary file, not CSV or JSON"
                    " Lines text"
                )
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as error:
                line += chunk[: error.start].count(b"\n")
                byte = chunk[error.start]
                raise cli.InputError(
                    f"{shown}: line {line}: byte 0x{byte:02x} is not UTF-8: save the file as"
                    " UTF-8 (e.g. iconv -f latin1 -t utf-8)"
                ) from None
            line += chunk.count(b"\n")
            body = chunk
            if in_header:
                in_header = b"\n" not in chunk
                body = b"" if in_header else chunk[chunk.index(b"\n") + 1 :]
            has_rows = has_rows or bool(body.strip())
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise cli.InputError(
                f"{shown}: line {line}: the file ends inside a UTF-8 character: save it as UTF-8"
            ) from None
    return has_rows


def column_names(path: str, kind: str) -> list[str]:
    """The column names as the file has them (``datasets`` would rename or drop a repeat)."""
    if kind == "parquet":
        try:
            return list(pq.read_schema(path).names)
        except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
            why = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise cli.InputError(f"{path}: cannot read it as Parquet ({why})") from None
    if kind == "csv":
        with open(path, encoding="utf-8-sig", newline="") as handle:
            return next(csv.reader(handle), [])
    return []  # JSON Lines: a repeated key is one key


def check_columns_are_unique(path: str, kind: str) -> None:
    names = column_names(path, kind)
    repeated = next((name for name in names if names.count(name) > 1), None)
    if repeated is not None:
        raise cli.InputError(
            f"{runtime.to_gcs_uri(path)}: column {repeated!r} appears twice in the header:"
            " name each column once"
        )


def check_rows_fit_the_header(path: str) -> None:
    """InputError naming the line of the first row with more fields than the header (an
    unquoted comma in a text): datasets' error has no line, and pandas' own count skips the
    quoted newlines. A shorter row is read with empty cells, so it passes here."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, [])
            row_start = reader.line_num + 1
            for row in reader:
                if len(row) > len(header):
                    raise cli.InputError(
                        f"{runtime.to_gcs_uri(path)}: line {row_start}: {len(row)} fields where"
                        f" the header has {len(header)} (quote a text that holds a comma)"
                    )
                row_start = reader.line_num + 1
        except csv.Error:
            return  # a field past csv's size limit: datasets' own error says what it can


@contextlib.contextmanager
def _quiet_datasets():
    """``datasets`` logs an ERROR of its own before raising; the trainer's one line says it."""
    datasets_logger = logging.getLogger("datasets")
    level = datasets_logger.level
    datasets_logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        datasets_logger.setLevel(level)


def load_files(spec: str, text_column: str | None = None) -> datasets.Dataset:
    """One ``datasets.Dataset`` from CSV, JSON Lines or Parquet files.

    Each file is checked first (UTF-8 text, each column named once); ``text_column``, when
    given, is read as text even where every value looks like a number.
    """
    files = data_files(spec)
    kinds = {_BUILDERS.get(os.path.splitext(name)[1].lower()) for name in files}
    if None in kinds or len(kinds) != 1:
        raise cli.InputError(
            f"{spec}: use files of one format: .csv, .jsonl/.json or .parquet "
            f"(got {', '.join(sorted({os.path.basename(f) for f in files})[:5])})"
        )
    kind = kinds.pop()
    options = {}
    has_rows = kind == "parquet"  # an empty Parquet table is caught after loading
    for path in files:
        if kind != "parquet":
            has_rows = check_text_file(path, header=kind == "csv") or has_rows
        check_columns_are_unique(path, kind)
    if not has_rows:
        raise cli.InputError(f"{spec}: no examples (a header at most, no rows)")
    if kind == "csv" and text_column and text_column in column_names(files[0], kind):
        options["converters"] = {text_column: str}  # "007" stays "007", not 7
    try:
        with _quiet_datasets():
            dataset = datasets.load_dataset(kind, data_files=files, split="train", **options)
    except Exception as error:  # noqa: BLE001 - any parse error is the user's data, say so
        if kind == "csv":
            for path in files:
                check_rows_fit_the_header(path)
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise cli.InputError(f"{spec}: cannot read the data ({first_line})") from None
    feature = dataset.features.get(text_column) if text_column else None
    if isinstance(feature, datasets.Value) and feature.dtype not in ("string", "large_string"):
        dataset = dataset.cast_column(text_column, datasets.Value("string"))
    return dataset
