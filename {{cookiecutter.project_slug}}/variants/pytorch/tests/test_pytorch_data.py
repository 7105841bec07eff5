"""Bad training data is refused with one line naming the file and row, never a traceback.

Each case is a file this test writes and the line ``data.load_raw`` (what the runtime's run
calls first, through ``SPEC.make_data``) must print: the label rules (``labels.py``) and the
columns and texts (``data.py``). The files themselves (encodings, binary data, headers, formats)
are checked by the runtime's ``input_files``, tested with it
(vertex-trainer-runtime/tests/test_torch_input_files.py).
"""

from __future__ import annotations

import logging

import pytest
from vertex_trainer_runtime import cli

from trainer import data
from trainer.spec import SPEC

ROWS = 200  # enough rows that one odd label is rare


def table(texts=None, labels=None, rows: int = ROWS) -> dict[str, list]:
    """A valid two-class table: review-like texts, labels 0/1 alternating."""
    texts = texts or [f"review number {i} was {'good' if i % 2 else 'bad'}" for i in range(rows)]
    labels = labels or [i % 2 for i in range(len(texts))]
    return {"text": texts, "label": labels}


def csv_text(columns: dict[str, list]) -> str:
    rows = zip(*columns.values(), strict=True)
    lines = [",".join(columns)] + [",".join("" if v is None else str(v) for v in r) for r in rows]
    return "\n".join(lines) + "\n"


def with_label(row: int, value) -> dict[str, list]:
    columns = table()
    columns["label"][row] = value
    return columns


# file name: (file text or table, extra flags, the one line it must print; PATH is the file)
BAD = {
    "typo_label.csv": (
        with_label(17, "x"),
        [],
        f"PATH: data row 18: label 'x' occurs in only 1 of {ROWS} rows, a typo? Fix it, or"
        " list the classes to train on all of them: --label-names 0,1,x",
    ),
    "typo_label_2.csv": (
        with_label(3, 2),
        [],
        f"PATH: data row 4: label '2' occurs in only 1 of {ROWS} rows",
    ),
    "unlisted_label.csv": (
        with_label(5, "maybe"),
        ["--label-names=0,1"],
        "PATH: data row 6: label 'maybe' is not one of --label-names 0,1",
    ),
    "no_label_value.csv": (
        with_label(9, None),
        [],
        "PATH: 1 rows have no 'label' value (the first is data row 10)",
    ),
    "inf_label.csv": (
        with_label(6, "inf"),
        [],
        "PATH: data row 7: label inf in 'label' is not a finite number",
    ),
    "beyond_float_label.csv": (
        with_label(11, "-1e999"),
        [],
        "PATH: data row 12: label -inf in 'label' is not a finite number",
    ),
    "one_class.csv": (
        table(labels=[1] * ROWS),
        [],
        "PATH: column 'label' needs at least 2 classes, got ",
    ),
    "all_empty.csv": (
        table(texts=[" "] * ROWS),
        [],
        "PATH: every row has an empty 'text': no text to train on",
    ),
    "no_text_column.csv": (
        {"review": table()["text"], "label": table()["label"]},
        [],
        "PATH: no column 'text' (columns: review, label); set --text-column",
    ),
    "wrong_label_flag.csv": (
        table(),
        ["--label-column=class"],
        "PATH: no column 'class' (columns: text, label); set --label-column",
    ),
    "list_label.jsonl": (
        '{"text": "a", "label": 0}\n{"text": "b", "label": "x"}\n{"text": "c", "label": [1]}\n',
        [],
        "PATH: data row 3: label [1] in 'label' is not a number or text",
    ),
}


def load(path, *extra: str):
    parsed = SPEC.parse([f"--train-data={path}", *extra])
    return data.load_raw(parsed.shared, parsed.data)


@pytest.mark.parametrize("name", BAD)
def test_bad_data_is_refused_with_one_line(tmp_path, caplog, name):
    content, extra, line = BAD[name]
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else csv_text(content), encoding="utf-8")
    caplog.set_level(logging.INFO)
    with pytest.raises(cli.InputError) as refused:  # any other exception is a traceback
        load(path, *extra)
    message = str(refused.value)
    assert message.startswith(line.replace("PATH", str(path))), message
    assert "\n" not in message
    # Nothing logged an ERROR of its own before the trainer's line (datasets did).
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_label_names_set_the_classes_and_their_order(tmp_path):
    """A rare label listed in --label-names trains on every class; the names set the order."""
    (tmp_path / "three.csv").write_text(csv_text(with_label(17, "x")))
    assert load(tmp_path / "three.csv", "--label-names=0,1,x").label_names == ["0", "1", "x"]
    path = tmp_path / "named.csv"
    path.write_text(csv_text(table(labels=["pos", "neg"] * (ROWS // 2))))
    assert load(path).label_names == ["neg", "pos"]
    assert load(path, "--label-names=pos,neg").label_names == ["pos", "neg"]


def test_empty_texts_are_dropped_with_one_line(tmp_path, caplog):
    path = tmp_path / "blanks.csv"
    columns = table()
    for row in (4, 9, 11):
        columns["text"][row] = ""
    path.write_text(csv_text(columns))
    caplog.set_level(logging.WARNING, logger="trainer.data")
    raw = load(path, "--eval-data=" + str(path))
    assert len(raw.train) == ROWS - 3 and len(raw.eval) == ROWS - 3
    warnings = [r.getMessage() for r in caplog.records if r.name == "trainer.data"]
    assert f"{path}: dropped 3 of {ROWS} rows with an empty 'text' (the first is data row 5)" in (
        warnings
    )
