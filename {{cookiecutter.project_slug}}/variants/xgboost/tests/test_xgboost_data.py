"""Data: the hostile data set (bad training and eval files, each refused with one line before
any work), encoding, held-out rows and BigQuery's project rule. The files themselves are listed,
counted and shared out by the runtime (``vertex-trainer-runtime/tests/test_xgboost_*.py``)."""

from __future__ import annotations

import logging
import sys
import types

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import FAST, run_trainer
from vertex_trainer_runtime import cli
from vertex_trainer_tools.trainer_runs import run_in_process

from trainer import data
from trainer import schema as schemas

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


def with_value(column: str, row: int, value) -> bytes:
    table = frame().astype({column: object})
    table.loc[row, column] = value
    return csv(table)


def parquet(names: list[str], columns: list[list]) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(columns, names=names), sink)
    return sink.getvalue().to_pybytes()


GOOD = csv(frame())
LATIN1 = frame().astype({"city": object})
LATIN1.loc[5, "city"] = "zürich"
ONE_CLASS = "--label-column=y: the label column has one class (0) in all training rows"
FREE_TEXT = frame().assign(note=[f"customer said thing {i}" for i in range(ROWS)])


def bad_train(name: str, content: bytes, why: str, kind: str = "binary", eval_file=GOOD):
    """A bad training file, the eval file, and how its one ERROR line starts after the path."""
    return pytest.param(content, eval_file, kind, "{train}: " + why, id=name)


def bad_eval(name: str, content: bytes, why: str, kind: str = "binary"):
    return pytest.param(GOOD, content, kind, "{eval}: " + why, id=name)


# The hostile data set: the trainer's main in this process (no start-up per case; a trainer
# process takes the same path in test_eval_data_errors_name_the_eval_source). {train}/{eval}:
# the files' paths.
BEYOND = "is beyond the float range (XGBoost reads float32, at most ±3.4e38)"
FEATURE, LABEL, REG = "feature column 'a':", "label column 'y':", "regression"
AT_7, AT_10 = "; the first is line 7 of {train}", "; the first is line 10 of {eval}"
BAD = [
    bad_train("empty", b"", "the file is empty"),
    bad_train("header only", b"a,city,y\n", "no rows"),
    bad_train("repeated column", b"a,a,y\n1,2,0\n3,4,1\n", "column 'a' appears twice"),
    bad_train(
        "repeated parquet column", parquet(["a", "a", "y"], [[1.0, 2.0], [3.0, 4.0], [0, 1]]), ""
    ),
    bad_train(
        "no label column",
        csv(frame().drop(columns="y")),
        "label column 'y' not found (columns: a, city); set --label-column",
    ),
    bad_train("empty label", with_value("y", 7, None), "label column 'y' has 1 empty values"),
    bad_train(
        "infinite feature",
        with_value("a", 0, np.inf),
        "feature column 'a' has the infinite value inf",
    ),
    bad_train("a past f32", with_value("a", 3, "1e39"), f"{FEATURE} 1e+39 {BEYOND}"),
    bad_train("a past f64", with_value("a", 5, "1e999"), FEATURE + " '1e999' " + BEYOND + AT_7),
    bad_train("a of 400 digits", with_value("a", 2, "9" * 400), f"{FEATURE} '{'9' * 20}...'"),
    bad_train(
        "free text",
        csv(FREE_TEXT),
        "feature column 'note' holds text (e.g. 'customer said thing 0'), "
        "not numbers: 40 distinct values",
    ),
    bad_train("latin-1", LATIN1.to_csv(index=False).encode("latin-1"), "cannot read it as CSV: "),
    bad_train("binary", b"PK\x03\x04\x00\x00\xff\xfe\x00binary", "cannot read"),
    bad_train(
        "ragged row", GOOD + b"1.0,oslo,1,surplus\n", "cannot read it as CSV: Error tokenizing data"
    ),
    bad_train("not parquet", b"this is not parquet", "cannot read it as Parquet: "),
    bad_train(
        "too many classes",
        csv(frame(600).assign(y=range(600))),
        "label column 'y' has more than 256 distinct values",
        "multiclass",
    ),
    bad_train(
        "text regression label",
        with_value("y", 4, "high"),
        "regression needs a numeric label column; 'y' has 'high'",
        "regression",
    ),
    pytest.param(csv(frame().assign(y=0)), GOOD, "binary", ONE_CLASS, id="one label class"),
    bad_eval(
        "infinite regression label",
        with_value("y", 2, np.inf),
        "label column 'y' has the infinite value inf",
        "regression",
    ),
    bad_eval("y past f32", with_value("y", 4, "-1e39"), f"{LABEL} -1e+39 {BEYOND}", "regression"),
    bad_eval("y past f64", with_value("y", 8, "1e999"), LABEL + " '1e999' " + BEYOND + AT_10, REG),
    bad_eval("y of 400 digits", with_value("y", 8, "1" * 400), f"{LABEL} '{'1' * 20}...'", REG),
    bad_eval(
        "unknown eval label",
        with_value("y", 3, 7),
        "label 7 in column 'y' is not one of the training classes (0, 1)",
    ),
    bad_eval("empty eval label", with_value("y", 3, None), "label column 'y' has 1 empty values"),
    bad_eval(
        "eval lacks a feature", csv(frame().drop(columns="city")), "feature column(s) missing: city"
    ),
    bad_eval(
        "text in a numeric eval column",
        with_value("a", 6, "n/a?"),
        "feature column 'a' is numeric in the training data but has 'n/a?' here",
    ),
    bad_eval(
        "infinite eval feature",
        with_value("a", 1, -np.inf),
        "feature column 'a' has the infinite value -inf",
    ),
    bad_eval("empty eval", b"", "the file is empty"),
    bad_eval(
        "one eval label class",
        csv(frame().assign(y=0)),
        "the label column has one class (0) in all eval rows",
    ),
]


@pytest.mark.parametrize("train, evaluation, kind, line", BAD)
def test_bad_data_is_refused_with_one_line_and_writes_nothing(
    tmp_path, monkeypatch, request, train, evaluation, kind, line
):
    paths, suffix = {}, ".parquet" if "parquet" in request.node.callspec.id else ".csv"
    for role, content in (("train", train), ("eval", evaluation)):
        paths[role] = tmp_path / f"{role}{suffix}"
        paths[role].write_bytes(content)
    model_dir, metrics = tmp_path / "model", tmp_path / "metrics"
    argv = [f"--train-data={paths['train']}", f"--eval-data={paths['eval']}", "--label-column=y"]
    argv += [f"--objective={kind}", f"--model-dir={model_dir}", *FAST]
    argv += [f"--checkpoint-dir={tmp_path / 'checkpoints'}"]
    result = run_in_process(argv, monkeypatch, env={"CLOUD_ML_HP_METRIC_FILE": str(metrics)})
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    expected = "ERROR: " + line.format(train=paths["train"], eval=paths["eval"])
    assert len(errors) == 1 and errors[0].startswith(expected), result.stderr
    assert result.stderr.rstrip().endswith(errors[0]), "a message of one line"
    assert "Traceback" not in result.stderr and "Boosting" not in result.stderr
    assert not model_dir.exists() and not metrics.exists()


def test_the_hostile_data_set_is_large():
    assert len(BAD) >= 20


def test_eval_data_errors_name_the_eval_source(tmp_path):
    (tmp_path / "train.csv").write_bytes(GOOD)
    (tmp_path / "eval.csv").write_bytes(csv(frame().assign(y=7)))
    args = [f"--train-data={tmp_path / 'train.csv'}", f"--eval-data={tmp_path / 'eval.csv'}"]
    args += ["--label-column=y", f"--model-dir={tmp_path / 'model'}", *FAST]
    result = run_trainer(args)
    assert result.returncode == 2
    assert "eval.csv: label 7 in column 'y' is not one of the training classes" in result.stderr
    assert not (tmp_path / "model").exists()


def prepare(train: str, evaluation: str, kind: str):
    """What ``train.prepare`` does with the data before the first boosting round."""
    train_frame = data.read(train, "train", label_column="y", kind=kind)
    eval_frame = data.read(evaluation, "eval", label_column="y", kind=kind)
    schema = schemas.load_schema(train_frame, "y", kind, train)
    schemas.encode(train_frame, schema, train)
    return schemas.encode(eval_frame, schema, evaluation)


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


def test_parquet_text_columns_and_label_strings_are_encoded(tmp_path):
    table = frame().assign(y=lambda f: np.where(f["y"] == 1, "yes", "no"))
    table.loc[3, "city"] = None
    table.to_parquet(tmp_path / "train.parquet")
    read = data.read(str(tmp_path / "train.parquet"), "train", label_column="y", kind="binary")
    schema = schemas.load_schema(read, "y", "binary", "train.parquet")
    assert schema.classes == ["no", "yes"]
    assert schema.categories == {"city": ["oslo", "paris", "rome"]}
    unseen = read.assign(city="lima")
    matrix, labels = schemas.encode(unseen, schema, "eval")
    assert np.isnan(matrix[:, 1]).all()  # unseen category: missing, not an error
    matrix, labels = schemas.encode(read, schema, "train")
    assert np.isnan(matrix[3, 1]) and set(labels) == {0.0, 1.0}


def test_held_out_synthetic_rows_are_the_same_for_any_replica_count():
    """As the files' held-out rows (the runtime's test): one set, in one order, on 1 or 3."""
    eval_rows = {}
    for world in (1, 3):
        shards = [
            data.read_rows("synthetic:900", "train", label_column="y", kind="binary",
                           shard=data.Shard(rank, world), hold_out=0.2)
            for rank in range(world)
        ]  # fmt: skip
        eval_rows[world] = pd.concat([f[m] for f, m in shards], ignore_index=True)
    pd.testing.assert_frame_equal(eval_rows[1], eval_rows[3])
    with pytest.raises(cli.InputError, match="too few training rows"):
        data.read_rows("synthetic:1", "train", label_column="y", kind="binary", hold_out=0.1)


def test_bigquery_without_the_client_library_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.cloud.bigquery", None)  # import fails
    with pytest.raises(cli.InputError, match=r"google-cloud-bigquery\[pandas\]"):
        data.read("bq://p.d.t", "train", label_column="y", kind="binary", project="p")


def test_bigquery_reads_with_the_explicit_project(monkeypatch):
    calls = {}

    class Rows:
        def to_dataframe(self):
            return frame(5)

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
    read = data.read("bq://ds.table", "train", label_column="y", kind="binary", project="123")
    assert calls == {"project": "123", "table": "123.ds.table"} and len(read) == 5
    options = {"label_column": "y", "kind": "binary", "project": "123"}
    data.read("bq://other.ds.t", "train", shard=data.Shard(1, 4), **options)
    assert calls["project"] == "123"  # billed to the job's project, reading another's table
    assert "FROM `other.ds.t`" in calls["sql"] and ", 4) = 1" in calls["sql"]
