"""Bad image folders, each refused in one line: exit 2, one ``ERROR:`` line naming the folder or
file, nothing written, no traceback from the input pipeline (the image checks themselves: the
runtime's ``vertex_trainer_runtime.keras.image_checks``, tested in vertex-trainer-runtime)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY, train
from vertex_trainer_runtime.keras import image_checks


def _pixels(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (12, 12, 3)).astype(np.uint8)


JPEG = tf.io.encode_jpeg(_pixels()).numpy()
PNG = tf.io.encode_png(_pixels()).numpy()
GOOD_IMAGES = {"a/one.jpg": JPEG, "a/two.jpg": JPEG, "b/one.png": PNG, "b/two.png": PNG}
UNREADABLE = "cannot read this image: "
BAD_FOLDERS = [
    # (name, {relative path: bytes}, extra arguments, the one line; {root} is the train folder)
    ("empty folder", {}, {}, "--train-data {root}: no class sub-folders"),
    ("no class folders", {"x.jpg": JPEG}, {}, "--train-data {root}: no class sub-folders"),
    ("no images", {"a/notes.txt": b"x", "b/y.txt": b"y"}, {}, "--train-data {root}: the class"),
    ("one class", {"a/x.jpg": JPEG}, {}, "--train-data {root}: found 1 class sub-folder (a)"),
    (
        "too few to hold out",
        {"a/x.jpg": JPEG, "b/y.png": PNG},
        {"validation_split": 0.99},
        "--train-data {root}: 2 images are too few",
    ),
    (
        "eval class not in train",
        GOOD_IMAGES,
        {"eval": {"c/x.jpg": JPEG}},
        "--eval-data {root}-eval: classes not in --train-data: c",
    ),
    (
        "unreadable eval image",
        GOOD_IMAGES,
        {"eval": {"a/x.jpg": JPEG, "b/bad.png": PNG[:30]}},
        "--eval-data {root}-eval/b/bad.png: cannot read this image: a truncated PNG",
    ),
    (
        "two unreadable",
        {"a/bad1.jpg": b"", "b/bad2.jpg": b"", "b/ok.png": PNG},
        {},
        "--train-data {root}/a/bad1.jpg: cannot read this image: the file is empty (1 more",
    ),
    ("missing folder", None, {}, "--train-data {root}: no such file or directory"),
    ("a file, not a folder", b"x", {}, "--train-data {root}: expected a folder"),
    (
        "synthetic eval for a folder",
        GOOD_IMAGES,
        {"eval_data": "synthetic"},
        "--eval-data synthetic goes with --train-data synthetic only",
    ),
]


def _write(root, files) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for relative, content in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(content)


def _folder(tmp_path, files) -> str:
    """The train folder holding ``files`` (None: no folder; bytes: a file in its place)."""
    root = tmp_path / "train"
    if isinstance(files, bytes):
        root.write_bytes(files)
    elif files is not None:
        _write(root, files)
    return str(root)


def _refused(tmp_path, capsys, argv: list[str]) -> str:
    """The one ERROR line of a run that must exit 2 and write no model."""
    job = tmp_path / "job"
    assert train([*TINY, *argv, "--epochs=1", f"--job-dir={job}"]) == 2
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, captured.err[-3000:]
    assert "Traceback" not in captured.err + captured.out
    assert not (job / "model").exists()
    return errors[0].removeprefix("ERROR: ")


@pytest.mark.parametrize("name, files, extra, line", BAD_FOLDERS, ids=[c[0] for c in BAD_FOLDERS])
def test_a_bad_image_folder_is_refused_in_one_line(tmp_path, capsys, name, files, extra, line):
    root = _folder(tmp_path, files)
    eval_data = extra.get("eval_data", "")
    if "eval" in extra:
        eval_data = root + "-eval"
        _write(tmp_path / "train-eval", extra["eval"])
    split = extra.get("validation_split", 0.25)
    argv = [f"--train-data={root}", f"--eval-data={eval_data}", f"--validation-split={split}"]
    assert _refused(tmp_path, capsys, argv).startswith(line.format(root=root))
    assert not (tmp_path / "job" / "checkpoints").exists()


def _sixty_pngs(damaged: bool) -> dict[str, bytes]:
    """60 tiny PNGs in two classes; with ``damaged``, the 37th in listing order has 200 bytes
    zeroed after its signature (its start and end intact: the cheap check cannot see it)."""
    files = {
        f"{'ab'[number % 2]}/{number:02d}.png": tf.io.encode_png(_pixels(number)).numpy()
        for number in range(60)
    }
    if damaged:
        bad = sorted(files)[36]
        files[bad] = files[bad][:8] + bytes(200) + files[bad][208:]
    return files


@pytest.mark.parametrize("where", ["train", "eval"])
def test_an_image_damaged_in_its_middle_of_a_large_set_stops_training_in_one_line(
    tmp_path, capsys, monkeypatch, where
):
    # A set above DECODE_ALL_MAX_FILES gets the first/last-bytes check only: the damaged file
    # fails to decode in training (or evaluation, for an --eval-data folder), and is then named.
    monkeypatch.setattr(image_checks, "DECODE_ALL_MAX_FILES", 10)
    root = _folder(tmp_path, _sixty_pngs(damaged=where == "train"))
    folder, flag, eval_data = f"{root}", "--train-data", ""
    if where == "eval":
        folder, flag, eval_data = f"{root}-eval", "--eval-data", f"{root}-eval"
        _write(tmp_path / "train-eval", _sixty_pngs(damaged=True))
    bad = sorted(_sixty_pngs(damaged=False))[36]
    line = _refused(tmp_path, capsys, [f"--train-data={root}", f"--eval-data={eval_data}"])
    assert line == (
        f"{flag} {folder}/{bad}: {UNREADABLE}TensorFlow cannot decode it "
        "(Invalid PNG. Failed to initialize decoder); replace or remove the file"
    )
