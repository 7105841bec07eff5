"""Data: bad input fails early with one line; sharding, encoding and BigQuery's project rule."""

from __future__ import annotations

import sys
import types

import numpy as np
import pandas as pd
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
