"""Data: bad input fails early with one line; sharding, encoding and BigQuery's project rule."""

from __future__ import annotations

import sys
import types

import numpy as np
import pandas as pd
import pytest
from conftest import FAST, run_in_process, run_trainer
from vertex_trainer_runtime import cli

from trainer import data
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
        "free text": (
            tmp_path / "free_text.csv",
            f"{tmp_path / 'free_text.csv'}: feature column 'note' holds text "
            "(e.g. 'customer said thing number 0'), not numbers: 40 distinct values",
        ),
    }


@pytest.mark.parametrize(
    "case", ["missing label", "empty file", "no rows", "free text", "inf feature", "repeated"]
)
def test_bad_data_fails_with_one_line_and_writes_nothing(tmp_path, case, monkeypatch):
    """The trainer's main in this process (no start-up per case; a trainer process takes the
    same path in test_eval_data_errors_name_the_eval_source)."""
    path, expected = _bad_inputs(tmp_path)[case]
    model_dir = tmp_path / "model"
    result = run_in_process(
        [
            f"--train-data={path}",
            f"--eval-data={tmp_path / 'good.csv'}",
            "--label-column=y",
            f"--model-dir={model_dir}",
            f"--checkpoint-dir={tmp_path / 'checkpoints'}",
            *FAST,
        ],
        monkeypatch,
    )
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and expected in errors[0], result.stderr
    assert "Traceback" not in result.stderr  # in this process: any other exception fails here
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


def _uneven_files(folder, sizes=(500, 300, 201), parquet: int | None = 1) -> pd.DataFrame:
    """Files of ``sizes`` rows (file ``parquet`` as Parquet, in row groups of 64), each row
    numbered by ``row``; returns all rows in file order."""
    folder.mkdir()
    frames, first = [], 0
    for index, size in enumerate(sizes):
        frame = _frame(size).assign(row=range(first, first + size))
        first += size
        if index == parquet:
            frame.to_parquet(folder / f"part-{index}.parquet", row_group_size=64)
        else:
            frame.to_csv(folder / f"part-{index}.csv", index=False)
        frames.append(frame)
    pd.DataFrame({"x": [1]}).to_csv(folder / "_SUCCESS.txt", index=False)  # not data
    return pd.concat(frames, ignore_index=True)


def _shards(spec: str, world: int, hold_out: float = 0.0) -> list[tuple[pd.DataFrame, np.ndarray]]:
    kwargs = {"label_column": "y", "kind": "binary", "hold_out": hold_out}
    return [
        data.read_rows(spec, "train", shard=data.Shard(r, world), **kwargs) for r in range(world)
    ]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_uneven_files_are_shared_out_evenly(tmp_path, world):
    """Files of 500, 300 and 201 rows (one Parquet): every replica gets a third or a half of
    the 1001 rows (within one row), every row once, in file order; one file alike."""
    rows = _uneven_files(tmp_path / "parts")
    shards = [frame for frame, _ in _shards(str(tmp_path / "parts"), world)]
    sizes = [len(frame) for frame in shards]
    print(f"rows per replica of {len(rows)} on {world}: {sizes}")
    assert max(sizes) - min(sizes) <= 1
    assert pd.concat(shards)["row"].tolist() == rows["row"].tolist()
    one = [len(frame) for frame, _ in _shards(str(tmp_path / "parts" / "part-0.csv"), world)]
    assert sum(one) == 500 and max(one) - min(one) <= 1
    glob_rows = data.read(
        str(tmp_path / "parts" / "part-[02].csv"), "train", label_column="y", kind="binary"
    )
    assert len(glob_rows) == 701


def test_held_out_rows_are_the_same_for_any_replica_count(tmp_path):
    """The eval rows held out of --train-data are one set, in one order, on 1, 2 or 3 replicas,
    and the replicas' training rows stay even."""
    rows = _uneven_files(tmp_path / "parts")
    spec = str(tmp_path / "parts")
    held_out = {}
    for world in (1, 2, 3):
        shards = _shards(spec, world, hold_out=0.1)
        training = [len(frame[~mask]) for frame, mask in shards]
        assert max(training) - min(training) <= 1, training
        eval_rows = pd.concat([frame[mask] for frame, mask in shards])["row"].tolist()
        train_rows = pd.concat([frame[~mask] for frame, mask in shards])["row"].tolist()
        assert sorted(eval_rows + train_rows) == rows["row"].tolist()
        held_out[world] = eval_rows
    assert held_out[1] == held_out[2] == held_out[3]
    assert 0.07 < len(held_out[1]) / len(rows) < 0.13  # about --eval-fraction of the rows
    other_seed = data.read_rows(
        spec, "train", label_column="y", kind="binary", hold_out=0.1, seed=7
    )
    assert other_seed[0][other_seed[1]]["row"].tolist() != held_out[1]
    # Synthetic rows alike.
    synthetic = {w: _shards("synthetic:900", w, hold_out=0.2) for w in (1, 3)}
    eval_rows = {
        w: pd.concat([f[m] for f, m in s], ignore_index=True) for w, s in synthetic.items()
    }
    pd.testing.assert_frame_equal(eval_rows[1], eval_rows[3])


def test_a_tiny_hold_out_still_holds_out_one_row(tmp_path):
    for fraction in (1e-9, 1 - 1e-9):
        frame, mask = data.read_rows(
            "synthetic:3", "train", label_column="y", kind="binary", hold_out=fraction
        )
        assert 1 <= mask.sum() <= 2
    with pytest.raises(cli.InputError, match="too few training rows"):
        data.read_rows("synthetic:1", "train", label_column="y", kind="binary", hold_out=0.1)


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
def test_one_label_class_fails_before_training(tmp_path, where, monkeypatch):
    """One class: no AUC (XGBoost reports NaN and a tuning trial gets nothing), so exit 2."""
    good = _frame()
    one_class = good.assign(y=0)
    good.to_csv(tmp_path / "good.csv", index=False)
    one_class.to_csv(tmp_path / "one_class.csv", index=False)
    files = {"train": tmp_path / "good.csv", "eval": tmp_path / "good.csv"}
    files[where] = tmp_path / "one_class.csv"
    model_dir = tmp_path / "model"
    result = run_in_process(
        [
            f"--train-data={files['train']}",
            f"--eval-data={files['eval']}",
            "--label-column=y",
            f"--model-dir={model_dir}",
            f"--checkpoint-dir={tmp_path / 'checkpoints'}",
            f"--job-dir={tmp_path / 'job'}",
            *FAST,
        ],
        monkeypatch,
        env={"CLOUD_ML_HP_METRIC_FILE": str(tmp_path / "metrics")},
    )
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "the label column has one class (0)" in errors[0], errors
    assert "Traceback" not in result.stderr and "Boosting" not in result.stderr
    assert not model_dir.exists() and not (tmp_path / "metrics").exists()
