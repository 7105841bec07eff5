"""The hostile data set: bad training and eval files, each refused with one ``InputError`` line.

Split out of ``test_xgboost_data.py`` (data checks that mostly run the trainer end to end): this
table of cases is read in-process and would have made that file too long.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from vertex_trainer_runtime import cli

from trainer import data
from trainer import schema as schemas

# --- the hostile data set: bad training and eval files, each refused with its one line -------
# Each case is written here and read in-process the way train.run reads it (data.read,
# schema.load_schema, schema.encode), so the set takes seconds; any exception other than
# cli.InputError would be a traceback for the user.

ROWS = 40


def frame(rows: int = ROWS) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "a": rng.normal(size=rows).round(3),
            "city": rng.choice(["paris", "oslo", "rome"], size=rows),
            "y": np.arange(rows) % 2,
        }
    )


def csv(table: pd.DataFrame) -> bytes:
    return table.to_csv(index=False).encode()


def with_value(column: str, row: int, value) -> pd.DataFrame:
    table = frame().astype({column: object})
    table.loc[row, column] = value
    return table


def parquet(names: list[str], columns: list[list]) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(columns, names=names), sink)
    return sink.getvalue().to_pybytes()


GOOD = csv(frame())
LATIN1 = frame().astype({"city": object})
LATIN1.loc[5, "city"] = "zürich"
# (name, train file, eval file, objective kind, the one line's text; {train}/{eval} are paths)
BAD = [
    ("empty", b"", GOOD, "binary", "{train}: the file is empty"),
    ("header only", b"a,city,y\n", GOOD, "binary", "{train}: no rows"),
    (
        "repeated column",
        b"a,a,y\n1,2,0\n3,4,1\n",
        GOOD,
        "binary",
        "{train}: column 'a' appears twice in the header",
    ),
    (
        "repeated parquet column",
        parquet(["a", "a", "y"], [[1.0, 2.0], [3.0, 4.0], [0, 1]]),
        GOOD,
        "binary",
        "{train}: ",
    ),
    (
        "no label column",
        csv(frame().drop(columns="y")),
        GOOD,
        "binary",
        "{train}: label column 'y' not found (columns: a, city); set --label-column",
    ),
    (
        "empty label",
        csv(with_value("y", 7, None)),
        GOOD,
        "binary",
        "{train}: label column 'y' has 1 empty values",
    ),
    (
        "infinite feature",
        csv(with_value("a", 0, np.inf)),
        GOOD,
        "binary",
        "{train}: feature column 'a' has the infinite value inf",
    ),
    (
        "free text",
        csv(frame().assign(note=[f"customer said thing {i}" for i in range(ROWS)])),
        GOOD,
        "binary",
        "{train}: feature column 'note' holds text (e.g. 'customer said thing 0'), "
        "not numbers: 40 distinct values",
    ),
    (
        "latin-1",
        LATIN1.to_csv(index=False).encode("latin-1"),
        GOOD,
        "binary",
        "{train}: cannot read it as CSV: ",
    ),
    ("binary", b"PK\x03\x04\x00\x00\xff\xfe\x00binary", GOOD, "binary", "{train}: cannot read"),
    (
        "ragged row",
        GOOD + b"1.0,oslo,1,surplus\n",
        GOOD,
        "binary",
        "{train}: cannot read it as CSV: Error tokenizing data",
    ),
    (
        "not parquet",
        b"this is not parquet",
        GOOD,
        "binary",
        "{train}: cannot read it as Parquet: ",
    ),
    (
        "too many classes",
        csv(frame(600).assign(y=range(600))),
        GOOD,
        "multiclass",
        "{train}: label column 'y' has more than 256 distinct values",
    ),
    (
        "text regression label",
        csv(with_value("y", 4, "high")),
        GOOD,
        "regression",
        "{train}: regression needs a numeric label column; 'y' has 'high'",
    ),
    (
        "infinite regression label",
        GOOD,
        csv(with_value("y", 2, np.inf)),
        "regression",
        "{eval}: label column 'y' has the infinite value inf",
    ),
    (
        "unknown eval label",
        GOOD,
        csv(with_value("y", 3, 7)),
        "binary",
        "{eval}: label 7 in column 'y' is not one of the training classes (0, 1)",
    ),
    (
        "empty eval label",
        GOOD,
        csv(with_value("y", 3, None)),
        "binary",
        "{eval}: label column 'y' has 1 empty values",
    ),
    (
        "eval lacks a feature",
        GOOD,
        csv(frame().drop(columns="city")),
        "binary",
        "{eval}: feature column(s) missing: city",
    ),
    (
        "text in a numeric eval column",
        GOOD,
        csv(with_value("a", 6, "n/a?")),
        "binary",
        "{eval}: feature column 'a' is numeric in the training data but has 'n/a?' here",
    ),
    (
        "infinite eval feature",
        GOOD,
        csv(with_value("a", 1, -np.inf)),
        "binary",
        "{eval}: feature column 'a' has the infinite value -inf",
    ),
    ("empty eval", GOOD, b"", "binary", "{eval}: the file is empty"),
]


def prepare(train: str, evaluation: str, kind: str):
    """What ``train.run`` does with the data before the first boosting round."""
    train_frame = data.read(train, "train", label_column="y", kind=kind)
    eval_frame = data.read(evaluation, "eval", label_column="y", kind=kind)
    schema = schemas.load_schema(train_frame, "y", kind, train)
    schemas.encode(train_frame, schema, train)
    return schemas.encode(eval_frame, schema, evaluation)


def suffix(content: bytes, name: str) -> str:
    return ".parquet" if "parquet" in name else ".csv"


@pytest.mark.parametrize("name, train, evaluation, kind, line", BAD, ids=[c[0] for c in BAD])
def test_bad_data_is_refused_with_one_line(tmp_path, name, train, evaluation, kind, line):
    paths = {}
    for role, content in (("train", train), ("eval", evaluation)):
        paths[role] = tmp_path / f"{role}{suffix(content, name)}"
        paths[role].write_bytes(content)
    with pytest.raises(cli.InputError) as refused:  # anything else is a traceback
        prepare(str(paths["train"]), str(paths["eval"]), kind)
    message = str(refused.value)
    assert message.startswith(line.format(train=paths["train"], eval=paths["eval"])), message
    assert "\n" not in message


def test_files_with_different_columns_are_refused(tmp_path):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "a.csv").write_bytes(GOOD)
    (tmp_path / "parts" / "b.csv").write_bytes(csv(frame().rename(columns={"a": "b"})))
    with pytest.raises(cli.InputError, match=r"parts: files have different columns \(a, city"):
        data.read(str(tmp_path / "parts"), "train", label_column="y", kind="binary")


def test_the_hostile_data_set_is_large():
    assert len(BAD) >= 20


def test_eval_categories_never_seen_in_training_are_named_in_one_warning(tmp_path, caplog):
    (tmp_path / "train.csv").write_bytes(GOOD)
    unseen = frame().astype({"city": object})
    unseen.loc[[1, 2, 3], "city"] = ["lima", "kyiv", "lima"]
    unseen.loc[4, "city"] = None  # a missing value is not an unseen category
    (tmp_path / "eval.csv").write_bytes(csv(unseen))
    caplog.set_level(logging.WARNING, logger="trainer.schema")
    matrix, _ = prepare(str(tmp_path / "train.csv"), str(tmp_path / "eval.csv"), "binary")
    assert np.isnan(matrix[[1, 2, 3, 4], 1]).all()
    warnings = [r.getMessage() for r in caplog.records if r.name == "trainer.schema"]
    assert warnings == [
        f"{tmp_path / 'eval.csv'}: column 'city' has 2 value(s) never seen in training"
        " ('kyiv', 'lima') in 3 row(s); the model treats them as missing"
    ]
