"""vertex_trainer_runtime.torch.input_files: hostile data files are refused with one line
naming the file and line, never a traceback. Each case is a file this test writes and the line
loading it must print."""

from __future__ import annotations

import io
import json
import logging

import pytest

pytest.importorskip("datasets")

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from vertex_trainer_runtime import cli  # noqa: E402
from vertex_trainer_runtime.torch import input_files  # noqa: E402

ROWS = 200


def table(texts=None, rows: int = ROWS) -> dict[str, list]:
    """A valid two-class table: review-like texts, labels 0/1 alternating."""
    texts = texts or [f"review number {i} was {'good' if i % 2 else 'bad'}" for i in range(rows)]
    return {"text": texts, "label": [i % 2 for i in range(len(texts))]}


def csv_text(columns: dict[str, list], header: list[str] | None = None) -> str:
    lines = [",".join(header or list(columns))]
    lines += [",".join(str(value) for value in row) for row in zip(*columns.values(), strict=True)]
    return "\n".join(lines) + "\n"


def parquet_bytes(names: list[str], columns: list[list]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table(columns, names=names), sink)
    return sink.getvalue()


GOOD = csv_text(table())
LATIN1 = GOOD.replace("review number 7", "critique numéro 7").encode("latin-1")
TWICE = csv_text({"a": table()["text"], **table()}, header=["text", "text", "label"])
LABEL_TWICE = csv_text({**table(), "b": table()["label"]}, header=["text", "label", "label"])
# Lines 2-6 rows, 7-8 one quoted text over two lines, 9 a text with an unquoted comma.
GOOD_LINES = GOOD.splitlines(keepends=True)
RAGGED_AFTER_MULTILINE = "".join(
    GOOD_LINES[:6]
    + ['"a review over two,\nquoted lines",1\n', "good, but long,0\n"]
    + GOOD_LINES[6:]
)
BAD = [
    # (file name, file bytes, the one line it must print; PATH is the file)
    ("empty.csv", b"", "PATH: no examples"),
    ("header_only.csv", b"text,label\n", "PATH: no examples"),
    ("latin1.csv", LATIN1, "PATH: line 9: byte 0xe9 is not UTF-8: save the file as UTF-8"),
    (
        "latin1_late.csv",
        (GOOD + "caf\xe9 was good,1\n").encode("latin-1"),
        f"PATH: line {ROWS + 2}: byte 0xe9 is not UTF-8",
    ),
    ("binary.csv", b"PK\x03\x04\x14\x00\x00\x00binary", "PATH: line 1: a NUL byte"),
    (
        "binary_late.csv",
        GOOD.encode() + b"\x00\x01\x02",
        f"PATH: line {ROWS + 2}: a NUL byte: this is a binary file",
    ),
    (
        "cut_utf8.csv",
        GOOD.encode() + "zoë".encode()[:-1],
        f"PATH: line {ROWS + 2}: the file ends inside a UTF-8 character",
    ),
    ("utf16.csv", GOOD.encode("utf-16"), "PATH: line 1: UTF-16 text: save the file as UTF-8"),
    (
        "twice.csv",
        TWICE.encode(),
        "PATH: column 'text' appears twice in the header: name each column once",
    ),
    ("label_twice.csv", LABEL_TWICE.encode(), "PATH: column 'label' appears twice in the header"),
    (
        "ragged.csv",
        (GOOD + "one,two,three,four\n").encode(),
        f"PATH: line {ROWS + 2}: 4 fields where the header has 2 (quote a text that holds a comma)",
    ),
    (
        "ragged_after_multiline.csv",
        RAGGED_AFTER_MULTILINE.encode(),
        "PATH: line 9: 3 fields where the header has 2 (quote a text that holds a comma)",
    ),
    ("notes.txt", b"just text\n", "PATH: use files of one format: .csv, .jsonl/.json"),
    (
        "broken.jsonl",
        b'{"text": "good", "label": 1}\n{"text": "bad", "label": \n',
        "PATH: cannot read the data (",
    ),
    (
        "latin1.jsonl",
        '{"text": "caf\xe9", "label": 1}\n'.encode("latin-1"),
        "PATH: line 1: byte 0xe9 is not UTF-8",
    ),
    ("corrupt.parquet", b"PAR1" + bytes(100) + b"PAR1", "PATH: cannot read it as"),
    (
        "twice.parquet",
        parquet_bytes(["text", "text", "label"], [table()["text"]] * 2 + [table()["label"]]),
        "PATH: column 'text' appears twice in the header: name each column once",
    ),
]


@pytest.mark.parametrize("name, content, line", BAD, ids=[case[0] for case in BAD])
def test_bad_data_is_refused_with_one_line(tmp_path, caplog, name, content, line):
    path = tmp_path / name
    path.write_bytes(content)
    caplog.set_level(logging.INFO)
    with pytest.raises(cli.InputError) as refused:  # any other exception is a traceback
        input_files.load_files(str(path), "text")
    message = str(refused.value)
    assert message.startswith(line.replace("PATH", str(path))), message
    assert "\n" not in message
    # Nothing logged an ERROR of its own before the trainer's line (datasets did).
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_the_hostile_file_set_is_large():
    assert len(BAD) >= 16


def test_numbers_as_text_are_read_as_text(tmp_path):
    path = tmp_path / "numbers.csv"
    path.write_text(csv_text(table(texts=[f"{i:03d}" for i in range(ROWS)])))
    loaded = input_files.load_files(str(path), "text")
    assert loaded.features["text"].dtype in ("string", "large_string")
    assert "007" in list(loaded["text"])
    jsonl = tmp_path / "numbers.jsonl"
    jsonl.write_text("".join(json.dumps({"text": i, "label": i % 2}) + "\n" for i in range(ROWS)))
    loaded = input_files.load_files(str(jsonl), "text")
    assert loaded.features["text"].dtype in ("string", "large_string")
