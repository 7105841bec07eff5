"""The hostile image set: unreadable images and bad folders, each refused in one line.

Split out of ``test_keras_data.py`` (which trains on well-formed image folders and TFDS data):
every case here must end in one ``cli.InputError`` line naming the file or folder, never in a
traceback from deep inside the input pipeline (``trainer/image_checks.py``, ``trainer/data.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY, train
from vertex_trainer_runtime import cli

from trainer import data, flags, image_checks


def _pixels(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (12, 12, 3)).astype(np.uint8)


JPEG = tf.io.encode_jpeg(_pixels()).numpy()
PNG = tf.io.encode_png(_pixels()).numpy()
# A 1x1 GIF and a 2x2 24-bit BMP, written out by hand (TensorFlow encodes neither).
GIF = bytes.fromhex(
    "47494638396101000100800000ffffff00000021f90401000000002c00000000010001000002024401003b"
)
BMP = (
    b"BM" + (70).to_bytes(4, "little") + bytes(4) + (54).to_bytes(4, "little")
    + (40).to_bytes(4, "little") + (2).to_bytes(4, "little") + (2).to_bytes(4, "little")
    + (1).to_bytes(2, "little") + (24).to_bytes(2, "little") + bytes(4)
    + (16).to_bytes(4, "little") + bytes(16) + bytes([255, 0, 0, 0, 255, 0, 0, 0]) * 2
)  # fmt: skip
UNREADABLE = "cannot read this image: "
GOOD_IMAGES = {"a/one.jpg": JPEG, "a/two.bmp": BMP, "b/one.png": PNG, "b/two.gif": GIF}
# (name, {relative path: bytes} of the train folder, the one line; {root} is that folder)
BAD_IMAGES = [
    ("truncated jpeg", {"b/x.jpg": JPEG[: len(JPEG) // 2]}, "a truncated JPEG"),
    ("jpeg cut then zero-padded", {"b/x.jpg": JPEG[:-40] + bytes(8)}, "a truncated JPEG"),
    ("truncated png", {"b/x.png": PNG[:-20]}, "a truncated PNG (no IEND chunk at its end)"),
    ("png cut in its header", {"b/x.png": PNG[:12]}, "a truncated PNG"),
    ("truncated gif", {"b/x.gif": GIF[:-6]}, "a truncated GIF"),
    ("truncated bmp", {"b/x.bmp": BMP[:60]}, "a truncated BMP (60 of 70 bytes)"),
    ("empty file", {"b/x.jpg": b""}, "the file is empty"),
    ("text named .jpg", {"b/x.jpg": b"not an image\n"}, "not a JPEG, PNG, BMP or GIF image"),
    ("html named .png", {"b/x.png": b"<html>403</html>"}, "not a JPEG, PNG, BMP or GIF image"),
    ("pdf named .jpeg", {"b/x.jpeg": b"%PDF-1.4\n..."}, "not a JPEG, PNG, BMP or GIF image"),
    ("webp named .jpg", {"b/x.jpg": b"RIFF\x10\x00\x00\x00WEBPVP8 "}, "not a JPEG, PNG, BMP"),
    ("git lfs pointer", {"b/x.png": b"version https://git-lfs.github.com/spec/v1\n"}, "not a"),
]
BAD_FOLDERS = [
    # (name, {relative path: bytes}, extra arguments, the one line; {root} is the train folder)
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
        {"a/bad1.jpg": b"", "b/bad2.jpg": b"", "b/ok.gif": GIF},
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


def _sources(train: str, eval_data: str | None = None, validation_split: float = 0.25):
    shared = cli.SharedFlags(train_data=train, eval_data=eval_data, seed=1)
    config = flags.Data(
        validation_split=validation_split, synthetic_examples=4, synthetic_classes=2
    )
    return data.sources(shared, config, 8)


@pytest.mark.parametrize("name, files, problem", BAD_IMAGES, ids=[c[0] for c in BAD_IMAGES])
def test_an_unreadable_image_is_named_in_one_line(tmp_path, name, files, problem):
    root = _folder(tmp_path, {**GOOD_IMAGES, **files})
    with pytest.raises(cli.InputError) as refused:  # anything else is a traceback
        _sources(root)
    bad = next(iter(files))
    assert str(refused.value).startswith(f"--train-data {root}/{bad}: {UNREADABLE}{problem}")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("name, files, extra, line", BAD_FOLDERS, ids=[c[0] for c in BAD_FOLDERS])
def test_a_bad_image_folder_is_refused_in_one_line(tmp_path, name, files, extra, line):
    root = _folder(tmp_path, files)
    eval_data = extra.get("eval_data")
    if "eval" in extra:
        eval_data = root + "-eval"
        _write(tmp_path / "train-eval", extra["eval"])
    with pytest.raises(cli.InputError) as refused:
        _sources(root, eval_data, extra.get("validation_split", 0.25))
    assert str(refused.value).startswith(line.format(root=root)), str(refused.value)


def _damaged_in_the_middle(image: bytes) -> bytes:
    """The same length, the format's signature and end intact, 200 bytes after the signature
    zeroed: what a bad sector or a partial overwrite leaves, which the cheap check cannot see
    and TensorFlow cannot decode (libjpeg only warns about damage inside the scan data)."""
    return image[:8] + bytes(200) + image[208:]


@pytest.mark.parametrize("kind", ["png", "jpg"])
def test_an_image_damaged_in_its_middle_deep_in_the_set_is_named_in_one_line(tmp_path, kind):
    # 60 images, the 37th in listing order damaged: decoded whole before training, not
    # found by the input pipeline mid-epoch in a traceback that names no file.
    encoded = {"png": tf.io.encode_png, "jpg": tf.io.encode_jpeg}[kind]
    files = {
        f"{'ab'[number % 2]}/{number:02d}.{kind}": encoded(_pixels(number)).numpy()
        for number in range(60)
    }
    bad = sorted(files)[36]
    files[bad] = _damaged_in_the_middle(files[bad])
    root = _folder(tmp_path, files)
    with pytest.raises(cli.InputError) as refused:
        _sources(root)
    message = str(refused.value)
    assert message.startswith(f"--train-data {root}/{bad}: {UNREADABLE}TensorFlow cannot decode")
    assert "\n" not in message


def _sixty_pngs(damaged: bool) -> dict[str, bytes]:
    """60 tiny PNGs in two classes; with ``damaged``, the 37th in listing order is damaged."""
    files = {
        f"{'ab'[number % 2]}/{number:02d}.png": tf.io.encode_png(_pixels(number)).numpy()
        for number in range(60)
    }
    if damaged:
        bad = sorted(files)[36]
        files[bad] = _damaged_in_the_middle(files[bad])
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
    job = tmp_path / "job"
    argv = [*TINY, f"--train-data={root}", f"--eval-data={eval_data}", "--epochs=1"]
    assert train([*argv, f"--job-dir={job}"]) == 2  # not a TensorFlow error: no traceback
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("ERROR:")]
    assert errors == [
        f"ERROR: {flag} {folder}/{bad}: {UNREADABLE}TensorFlow cannot decode it "
        "(Invalid PNG. Failed to initialize decoder); replace or remove the file"
    ]
    assert "Traceback" not in captured.err + captured.out
    assert not (job / "model").exists()


def test_a_decode_error_with_every_file_readable_is_raised_as_it_was(tmp_path):
    train_source, eval_source = _sources(_folder(tmp_path, GOOD_IMAGES))
    error = tf.errors.InvalidArgumentError(None, None, "Invalid PNG data")
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        with image_checks.name_the_unreadable_image(train_source, eval_source):
            raise error
    assert raised.value is error


def test_the_hostile_image_set_is_large():
    assert len(BAD_IMAGES) + len(BAD_FOLDERS) >= 20


def test_every_format_the_check_accepts_is_decoded(tmp_path):
    # The cheap check passes what TensorFlow reads: no image is refused that would train.
    extra = {"a/png_named.jpg": PNG, "b/padded.jpg": JPEG + bytes(4)}
    train, _ = _sources(_folder(tmp_path, {**GOOD_IMAGES, **extra}))
    images = train.shard(tf.distribute.InputContext()).map(train.load)
    assert len([image for image, _ in images]) == train.size == 4  # of 6, 25% held out
