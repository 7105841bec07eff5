"""Bad training data is refused with one line naming the file and row, never a traceback.

The hostile data set: each case is a file this test writes and the line loading it must print.
Loading runs in-process (``data.load_raw``, what ``train.run`` calls first), so the whole set
takes a few seconds.
"""

from __future__ import annotations

import io
import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from vertex_trainer_runtime import cli

from trainer import data, flags

ROWS = 200  # enough rows that one odd label is rare


def table(texts=None, labels=None, rows: int = ROWS) -> dict[str, list]:
    """A valid two-class table: review-like texts, labels 0/1 alternating."""
    texts = texts or [f"review number {i} was {'good' if i % 2 else 'bad'}" for i in range(rows)]
    labels = labels or [i % 2 for i in range(len(texts))]
    return {"text": texts, "label": labels}


def csv_text(columns: dict[str, list], header: list[str] | None = None) -> str:
    names = header or list(columns)
    out = io.StringIO()
    out.write(",".join(names) + "\n")
    for row in zip(*columns.values(), strict=True):
        out.write(",".join(_cell(value) for value in row) + "\n")
    return out.getvalue()


def _cell(value) -> str:
    text = "" if value is None else str(value)
    return f'"{text}"' if "," in text else text


def with_label(row: int, value) -> dict[str, list]:
    columns = table()
    columns["label"][row] = value
    return columns


def with_text(rows: list[int], value) -> dict[str, list]:
    columns = table()
    for row in rows:
        columns["text"][row] = value
    return columns


LATIN1 = csv_text(table()).replace("review number 7", "critique numéro 7").encode("latin-1")
BAD = [
    # (file name, file bytes, extra flags, the one line it must print; PATH is the file)
    ("empty.csv", b"", [], "PATH: no examples"),
    ("header_only.csv", b"text,label\n", [], "PATH: no examples"),
    ("latin1.csv", LATIN1, [], "PATH: line 9: byte 0xe9 is not UTF-8: save the file as UTF-8"),
    (
        "latin1_late.csv",
        (csv_text(table()) + "caf\xe9 was good,1\n").encode("latin-1"),
        [],
        f"PATH: line {ROWS + 2}: byte 0xe9 is not UTF-8",
    ),
    ("binary.csv", b"PK\x03\x04\x14\x00\x00\x00binary", [], "PATH: line 1: a NUL byte"),
    (
        "binary_late.csv",
        csv_text(table()).encode() + b"\x00\x01\x02",
        [],
        f"PATH: line {ROWS + 2}: a NUL byte: this is a binary file",
    ),
    (
        "cut_utf8.csv",
        csv_text(table()).encode() + "zoë".encode()[:-1],
        [],
        f"PATH: line {ROWS + 2}: the file ends inside a UTF-8 character",
    ),
    (
        "utf16.csv",
        csv_text(table()).encode("utf-16"),
        [],
        "PATH: line 1: UTF-16 text: save the file as UTF-8",
    ),
    (
        "twice.csv",
        csv_text({"a": table()["text"], **table()}, header=["text", "text", "label"]).encode(),
        [],
        "PATH: column 'text' appears twice in the header: name each column once",
    ),
    (
        "label_twice.csv",
        csv_text({**table(), "b": table()["label"]}, header=["text", "label", "label"]).encode(),
        [],
        "PATH: column 'label' appears twice in the header",
    ),
    (
        "typo_label.csv",
        csv_text(with_label(17, "x")).encode(),
        [],
        f"PATH: data row 18: label 'x' occurs in only 1 of {ROWS} rows, a typo? Fix it, or"
        " list the classes to train on all of them: --label-names 0,1,x",
    ),
    (
        "typo_label_2.csv",
        csv_text(with_label(3, 2)).encode(),
        [],
        f"PATH: data row 4: label '2' occurs in only 1 of {ROWS} rows",
    ),
    (
        "unlisted_label.csv",
        csv_text(with_label(5, "maybe")).encode(),
        ["--label-names=0,1"],
        "PATH: data row 6: label 'maybe' is not one of --label-names 0,1",
    ),
    (
        "no_label_value.csv",
        csv_text(with_label(9, None)).encode(),
        [],
        "PATH: 1 rows have no 'label' value (the first is data row 10)",
    ),
    (
        "one_class.csv",
        csv_text(table(labels=[1] * ROWS)).encode(),
        [],
        "PATH: column 'label' needs at least 2 classes, got ",
    ),
    (
        "all_empty.csv",
        csv_text(table(texts=[" "] * ROWS)).encode(),
        [],
        "PATH: every row has an empty 'text': no text to train on",
    ),
    (
        "no_text_column.csv",
        csv_text({"review": table()["text"], "label": table()["label"]}).encode(),
        [],
        "PATH: no column 'text' (columns: review, label); set --text-column",
    ),
    (
        "wrong_label_flag.csv",
        csv_text(table()).encode(),
        ["--label-column=class"],
        "PATH: no column 'class' (columns: text, label); set --label-column",
    ),
    (
        "ragged.csv",
        (csv_text(table()) + "one,two,three,four\n").encode(),
        [],
        "PATH: cannot read the data (",
    ),
    ("notes.txt", b"just text\n", [], "PATH: use files of one format: .csv, .jsonl/.json"),
    (
        "broken.jsonl",
        b'{"text": "good", "label": 1}\n{"text": "bad", "label": \n',
        [],
        "PATH: cannot read the data (",
    ),
    (
        "latin1.jsonl",
        '{"text": "caf\xe9", "label": 1}\n'.encode("latin-1"),
        [],
        "PATH: line 1: byte 0xe9 is not UTF-8",
    ),
]


def parquet_bytes(names: list[str], columns: list[list]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table(columns, names=names), sink)
    return sink.getvalue()


BAD.append(("corrupt.parquet", b"PAR1" + bytes(100) + b"PAR1", [], "PATH: cannot read it as"))
BAD.append(
    (
        "list_label.jsonl",
        b'{"text": "a", "label": 0}\n{"text": "b", "label": "x"}\n{"text": "c", "label": [1]}\n',
        [],
        "PATH: data row 3: label [1] in 'label' is not a number or text",
    )
)
BAD.append(
    (
        "twice.parquet",
        parquet_bytes(["text", "text", "label"], [table()["text"]] * 2 + [table()["label"]]),
        [],
        "PATH: column 'text' appears twice in the header: name each column once",
    )
)


def load(path, *extra: str):
    parsed = cli.parse(flags.Flags, flags.DESCRIPTION, [f"--train-data={path}", *extra])
    return data.load_raw(parsed.shared, parsed.data)


@pytest.mark.parametrize("name, content, extra, line", BAD, ids=[case[0] for case in BAD])
def test_bad_data_is_refused_with_one_line(tmp_path, caplog, name, content, extra, line):
    path = tmp_path / name
    path.write_bytes(content)
    caplog.set_level(logging.INFO)
    with pytest.raises(cli.InputError) as refused:  # any other exception is a traceback
        load(path, *extra)
    message = str(refused.value)
    assert message.startswith(line.replace("PATH", str(path))), message
    assert "\n" not in message
    # Nothing logged an ERROR of its own before the trainer's line (datasets did).
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_the_hostile_data_set_is_large():
    assert len(BAD) >= 20


def test_a_rare_label_listed_in_label_names_trains_on_every_class(tmp_path):
    path = tmp_path / "three.csv"
    path.write_text(csv_text(with_label(17, "x")))
    raw = load(path, "--label-names=0,1,x")
    assert raw.label_names == ["0", "1", "x"]


def test_label_names_set_the_class_order(tmp_path):
    path = tmp_path / "named.csv"
    path.write_text(csv_text(table(labels=["pos", "neg"] * (ROWS // 2))))
    assert load(path).label_names == ["neg", "pos"]
    assert load(path, "--label-names=pos,neg").label_names == ["pos", "neg"]


def test_empty_texts_are_dropped_with_one_line(tmp_path, caplog):
    path = tmp_path / "blanks.csv"
    path.write_text(csv_text(with_text([4, 9, 11], "")))
    caplog.set_level(logging.WARNING, logger="trainer.data")
    raw = load(path, "--eval-data=" + str(path))
    assert len(raw.train) == ROWS - 3 and len(raw.eval) == ROWS - 3
    warnings = [r.getMessage() for r in caplog.records if r.name == "trainer.data"]
    assert f"{path}: dropped 3 of {ROWS} rows with an empty 'text' (the first is data row 5)" in (
        warnings
    )


def test_numbers_as_text_are_read_as_text(tmp_path):
    path = tmp_path / "numbers.csv"
    path.write_text(csv_text(table(texts=[f"{i:03d}" for i in range(ROWS)])))
    raw = load(path)
    assert raw.train.features["text"].dtype in ("string", "large_string")
    assert "007" in list(raw.train["text"]) + list(raw.eval["text"])
    jsonl = tmp_path / "numbers.jsonl"
    jsonl.write_text("".join(json.dumps({"text": i, "label": i % 2}) + "\n" for i in range(ROWS)))
    assert load(jsonl).train.features["text"].dtype in ("string", "large_string")
