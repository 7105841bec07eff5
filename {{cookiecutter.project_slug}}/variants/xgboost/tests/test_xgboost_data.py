"""Data: bad input fails early with one line; sharding, encoding and BigQuery's project rule."""

from __future__ import annotations

import logging
import sys
import types

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import FAST, run_trainer, trainer_env

from trainer import cli, data
from trainer import schema as schemas


def _frame(rows: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "a": rng.normal(size=rows),
            "city": rng.choice(["paris", "oslo", "rome"], size=rows),
            "y": rng.integers(0, 2, size=rows),
        }
    )


def _bad_inputs(tmp_path) -> dict:
    good = _frame()
    good.to_csv(tmp_path / "good.csv", index=False)
    good.drop(columns="y").to_csv(tmp_path / "no_label.csv", index=False)
    (tmp_path / "empty.csv").write_text("")
    header_only = tmp_path / "header_only.csv"
    header_only.write_text("a,city,y\n")
    free_text = good.assign(note=[f"customer said thing number {i}" for i in range(len(good))])
    free_text.to_csv(tmp_path / "free_text.csv", index=False)
    good.assign(a=[np.inf, *good.a[1:]]).to_csv(tmp_path / "inf.csv", index=False)
    (tmp_path / "twice.csv").write_text("a,a,y\n1,2,0\n3,4,1\n")
    return {
        "inf feature": (tmp_path / "inf.csv", "feature column 'a' has the infinite value inf"),
        "repeated": (tmp_path / "twice.csv", "column 'a' appears twice in the header"),
        "missing label": (tmp_path / "no_label.csv", "label column 'y' not found"),
        "empty file": (tmp_path / "empty.csv", "empty.csv: the file is empty"),
        "no rows": (header_only, "header_only.csv: no rows"),
        "free text": (tmp_path / "free_text.csv", "feature column 'note' is text with 40"),
    }


@pytest.mark.parametrize(
    "case", ["missing label", "empty file", "no rows", "free text", "inf feature", "repeated"]
)
def test_bad_data_fails_with_one_line_and_writes_nothing(tmp_path, case):
    path, expected = _bad_inputs(tmp_path)[case]
    model_dir = tmp_path / "model"
    result = run_trainer(
        [
            f"--train-data={path}",
            f"--eval-data={tmp_path / 'good.csv'}",
            "--label-column=y",
            f"--model-dir={model_dir}",
            f"--checkpoint-dir={tmp_path / 'checkpoints'}",
            *FAST,
        ]
    )
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and expected in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not model_dir.exists()


def test_eval_data_errors_name_the_eval_source(tmp_path):
    _frame().to_csv(tmp_path / "train.csv", index=False)
    _frame().assign(y=7).to_csv(tmp_path / "eval.csv", index=False)
    result = run_trainer(
        [
            f"--train-data={tmp_path / 'train.csv'}",
            f"--eval-data={tmp_path / 'eval.csv'}",
            "--label-column=y",
            f"--model-dir={tmp_path / 'model'}",
            *FAST,
        ]
    )
    assert result.returncode == 2
    assert "eval.csv: label 7 in column 'y' is not one of the training classes" in result.stderr
    assert not (tmp_path / "model").exists()


def test_missing_path_and_bad_objective_are_input_errors(tmp_path):
    with pytest.raises(cli.InputError, match="no such file or folder"):
        data.list_files(str(tmp_path / "nowhere.csv"))
    with pytest.raises(cli.InputError, match="no CSV or Parquet files"):
        data.list_files(str(tmp_path))
    with pytest.raises(cli.InputError, match="gcsfuse"):
        data.list_files("gs://surely-not-mounted-bucket-4711/data.csv")


def test_files_are_sharded_by_file_then_by_row(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    for index in range(3):
        _frame(10).assign(part=index).to_csv(folder / f"part-{index}.csv", index=False)
    pd.DataFrame({"x": [1]}).to_csv(folder / "_SUCCESS.txt", index=False)  # not data
    kwargs = {"label_column": "y", "kind": "binary"}
    rank0 = data.read(str(folder), "train", shard=data.Shard(0, 2), **kwargs)
    rank1 = data.read(str(folder), "train", shard=data.Shard(1, 2), **kwargs)
    assert sorted(rank0["part"].unique()) == [0, 2] and list(rank1["part"].unique()) == [1]
    # Fewer files than replicas: every replica reads all of them and keeps every n-th row.
    one = str(folder / "part-0.csv")
    shards = [data.read(one, "train", shard=data.Shard(r, 3), **kwargs) for r in range(3)]
    assert sum(len(s) for s in shards) == 10
    glob_rows = data.read(str(folder / "part-[01].csv"), "train", **kwargs)
    assert len(glob_rows) == 20


def test_parquet_text_columns_and_label_strings_are_encoded(tmp_path):
    frame = _frame().assign(y=lambda f: np.where(f["y"] == 1, "yes", "no"))
    frame.loc[3, "city"] = None
    frame.to_parquet(tmp_path / "train.parquet")
    read = data.read(str(tmp_path / "train.parquet"), "train", label_column="y", kind="binary")
    schema = schemas.load_schema(read, "y", "binary", "train.parquet")
    assert schema.classes == ["no", "yes"]
    assert schema.categories == {"city": ["oslo", "paris", "rome"]}
    unseen = read.assign(city="lima")
    matrix, labels = schemas.encode(unseen, schema, "eval")
    assert np.isnan(matrix[:, 1]).all()  # unseen category: missing, not an error
    matrix, labels = schemas.encode(read, schema, "train")
    assert np.isnan(matrix[3, 1]) and set(labels) == {0.0, 1.0}


def test_bigquery_without_the_client_library_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.cloud.bigquery", None)  # import fails
    with pytest.raises(cli.InputError, match=r"google-cloud-bigquery\[pandas\]"):
        data.read("bq://p.d.t", "train", label_column="y", kind="binary", project="p")


def test_bigquery_reads_with_the_explicit_project(monkeypatch):
    calls = {}

    class Rows:
        def to_dataframe(self):
            return _frame(5)

    class Client:
        def __init__(self, project):
            calls["project"] = project

        def list_rows(self, table):
            calls["table"] = table
            return Rows()

        def query(self, sql):
            calls["sql"] = sql
            return Rows()

    monkeypatch.setitem(sys.modules, "google.cloud.bigquery", types.SimpleNamespace(Client=Client))
    with pytest.raises(cli.InputError, match="needs a project"):
        data.read("bq://ds.table", "train", label_column="y", kind="binary", project=None)
    frame = data.read("bq://ds.table", "train", label_column="y", kind="binary", project="123")
    assert calls == {"project": "123", "table": "123.ds.table"} and len(frame) == 5
    data.read(
        "bq://other.ds.t",
        "train",
        label_column="y",
        kind="binary",
        project="123",
        shard=data.Shard(1, 4),
    )
    assert calls["project"] == "123"  # billed to the job's project, reading another's table
    assert "FROM `other.ds.t`" in calls["sql"] and ", 4) = 1" in calls["sql"]


@pytest.mark.parametrize("where", ["train", "eval"])
def test_one_label_class_fails_before_training(tmp_path, where):
    """One class: no AUC (XGBoost reports NaN and a tuning trial gets nothing), so exit 2."""
    good = _frame()
    one_class = good.assign(y=0)
    good.to_csv(tmp_path / "good.csv", index=False)
    one_class.to_csv(tmp_path / "one_class.csv", index=False)
    files = {"train": tmp_path / "good.csv", "eval": tmp_path / "good.csv"}
    files[where] = tmp_path / "one_class.csv"
    model_dir = tmp_path / "model"
    result = run_trainer(
        [
            f"--train-data={files['train']}",
            f"--eval-data={files['eval']}",
            "--label-column=y",
            f"--model-dir={model_dir}",
            f"--checkpoint-dir={tmp_path / 'checkpoints'}",
            f"--job-dir={tmp_path / 'job'}",
            *FAST,
        ],
        trainer_env(CLOUD_ML_HP_METRIC_FILE=str(tmp_path / "metrics")),
    )
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "the label column has one class (0)" in errors[0], errors
    assert "Traceback" not in result.stderr and "Boosting" not in result.stderr
    assert not model_dir.exists() and not (tmp_path / "metrics").exists()


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
        "feature column 'note' is text with 40",  # merge() has no file name to give
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
