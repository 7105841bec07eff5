"""``vertex_trainer_runtime.keras.image_checks``: the hostile image set. Every unreadable image is
named in one ``cli.InputError`` line before training, never found mid-epoch in a traceback that
names no file; every image the check passes, TensorFlow decodes."""

from __future__ import annotations

import pytest

pytest.importorskip("keras")
np = pytest.importorskip("numpy")
tf = pytest.importorskip("tensorflow")

from vertex_trainer_runtime import cli  # noqa: E402
from vertex_trainer_runtime.keras import image_checks  # noqa: E402


def pixels(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (12, 12, 3)).astype(np.uint8)


JPEG = tf.io.encode_jpeg(pixels()).numpy()
PNG = tf.io.encode_png(pixels()).numpy()
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
# (name, {relative path: bytes}, the reason in the one line)
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


def write(root, files) -> list[str]:
    """The files under ``root``; their paths in listing order."""
    for relative, content in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(content)
    return [str(root / relative) for relative in sorted(files)]


def test_the_hostile_image_set_is_large():
    assert len(BAD_IMAGES) >= 12


@pytest.mark.parametrize("name, files, problem", BAD_IMAGES, ids=[c[0] for c in BAD_IMAGES])
def test_an_unreadable_image_is_named_in_one_line(tmp_path, name, files, problem):
    paths = write(tmp_path, {**GOOD_IMAGES, **files})
    with pytest.raises(cli.InputError) as refused:  # anything else is a traceback
        image_checks.check_image_files(paths, "--train-data")
    bad = tmp_path / next(iter(files))
    assert str(refused.value).startswith(f"--train-data {bad}: {UNREADABLE}{problem}")
    assert "\n" not in str(refused.value)


def test_two_unreadable_images_name_the_first_and_count_the_rest(tmp_path):
    paths = write(tmp_path, {"a/bad1.jpg": b"", "b/bad2.jpg": b"", "b/ok.gif": GIF})
    with pytest.raises(cli.InputError, match=r"bad1.jpg: .*the file is empty \(1 more"):
        image_checks.check_image_files(paths, "--eval-data")


def damaged_in_the_middle(image: bytes) -> bytes:
    """The same length, the format's signature and end intact, 200 bytes after the signature
    zeroed: what a bad sector or a partial overwrite leaves, which the cheap check cannot see
    and TensorFlow cannot decode (libjpeg only warns about damage inside the scan data)."""
    return image[:8] + bytes(200) + image[208:]


@pytest.mark.parametrize("kind", ["png", "jpg"])
def test_an_image_damaged_in_its_middle_deep_in_the_set_is_named_in_one_line(tmp_path, kind):
    # 60 images, the 37th in listing order damaged: a set this small is decoded whole.
    encode = {"png": tf.io.encode_png, "jpg": tf.io.encode_jpeg}[kind]
    files = {f"{'ab'[n % 2]}/{n:02d}.{kind}": encode(pixels(n)).numpy() for n in range(60)}
    bad = sorted(files)[36]
    files[bad] = damaged_in_the_middle(files[bad])
    with pytest.raises(cli.InputError) as refused:
        image_checks.check_image_files(write(tmp_path, files), "--train-data")
    message = str(refused.value)
    assert message.startswith(f"--train-data {tmp_path / bad}: {UNREADABLE}TensorFlow cannot")
    assert "\n" not in message


def test_a_decode_failure_in_training_is_turned_into_the_line_naming_the_file(tmp_path):
    files = {f"{'ab'[n % 2]}/{n:02d}.png": tf.io.encode_png(pixels(n)).numpy() for n in range(6)}
    bad = sorted(files)[3]
    files[bad] = damaged_in_the_middle(files[bad])
    source = type("Source", (), {"files": tuple(write(tmp_path, files)), "flag": "--eval-data"})
    error = tf.errors.InvalidArgumentError(None, None, "Invalid PNG data")
    with pytest.raises(cli.InputError) as refused:
        with image_checks.name_the_unreadable_image(type("NoFiles", (), {"files": ()}), source):
            raise error
    assert str(refused.value) == (
        f"--eval-data {tmp_path / bad}: {UNREADABLE}TensorFlow cannot decode it "
        "(Invalid PNG. Failed to initialize decoder); replace or remove the file"
    )


def test_a_decode_error_with_every_file_readable_is_raised_as_it_was(tmp_path):
    source = type("Source", (), {"files": tuple(write(tmp_path, GOOD_IMAGES)), "flag": "--x"})
    error = tf.errors.InvalidArgumentError(None, None, "Invalid PNG data")
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        with image_checks.name_the_unreadable_image(source):
            raise error
    assert raised.value is error


def test_every_format_the_check_accepts_is_decoded(tmp_path):
    # The cheap check passes what TensorFlow reads: no image is refused that would train.
    extra = {"a/png_named.jpg": PNG, "b/padded.jpg": JPEG + bytes(4)}
    paths = write(tmp_path, {**GOOD_IMAGES, **extra})
    image_checks.check_image_files(paths, "--train-data")
    for path in paths:
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        assert image.shape[-1] == 3 and image.shape[0] > 0
