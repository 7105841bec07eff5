"""CSV and Parquet files of ``vertex_trainer_runtime.xgboost.tabular_files``: listing, and each
replica's share of the rows with the held-out ones (``row_plan``), the same for any replica count.
"""

from __future__ import annotations

import pytest

pytest.importorskip("xgboost")  # with numpy, pandas and pyarrow: an XGBoost project's packages

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from vertex_trainer_runtime.cli import InputError  # noqa: E402
from vertex_trainer_runtime.xgboost import row_plan, tabular_files  # noqa: E402


def _frame(rows: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "a": rng.normal(size=rows),
            "city": rng.choice(["paris", "oslo", "rome"], size=rows),
            "y": rng.integers(0, 2, size=rows),
        }
    )


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


def _shards(spec: str, world: int, hold_out: float = 0.0, seed: int = 42) -> list:
    return [
        tabular_files.read_rows(spec, "train", rank, world, hold_out, seed) for rank in range(world)
    ]


def test_missing_paths_and_folders_without_data_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="no such file or folder"):
        tabular_files.list_files(str(tmp_path / "nowhere.csv"))
    with pytest.raises(InputError, match="no CSV or Parquet files"):
        tabular_files.list_files(str(tmp_path))
    with pytest.raises(InputError, match="gcsfuse"):
        tabular_files.list_files("gs://surely-not-mounted-bucket-4711/data.csv")


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
    glob_rows, _ = tabular_files.read_rows(str(tmp_path / "parts" / "part-[02].csv"), "train")
    assert len(glob_rows) == 701


def test_held_out_rows_are_the_same_for_any_replica_count(tmp_path):
    """The eval rows held out of the files are one set, in one order, on 1, 2 or 3 replicas,
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
    assert 0.07 < len(held_out[1]) / len(rows) < 0.13  # about the hold-out share of the rows
    ((frame, mask),) = _shards(spec, 1, hold_out=0.1, seed=7)
    assert frame[mask]["row"].tolist() != held_out[1]


def test_a_tiny_hold_out_still_holds_out_one_row():
    for fraction in (1e-9, 1 - 1e-9):
        plan = row_plan.plan(3, fraction, 42)
        assert 1 <= plan.held_out(0, 3).sum() <= 2
    with pytest.raises(InputError, match="too few training rows"):
        row_plan.plan(1, 0.1, 42)


def test_files_with_different_columns_are_refused(tmp_path):
    (tmp_path / "parts").mkdir()
    _frame().to_csv(tmp_path / "parts" / "a.csv", index=False)
    _frame().rename(columns={"a": "b"}).to_csv(tmp_path / "parts" / "b.csv", index=False)
    with pytest.raises(InputError, match=r"parts: files have different columns \(a, city"):
        tabular_files.read_rows(str(tmp_path / "parts"), "train")
