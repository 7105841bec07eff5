"""Text-classification data: IMDB by default, CSV/JSONL/Parquet files, or a synthetic set.

Files may be local, ``/gcs/`` paths or ``gs://`` URIs (read through the Cloud Storage FUSE
mount), a single file, a folder or a glob. Everything goes through ``datasets``, so large files
are memory-mapped Arrow tables and tokenization is a cached, batched ``map``. Examples are not
padded here: the collator pads each batch to its own longest example (dynamic padding). The
training order of each epoch, a function of the seed and the epoch, is ``training_order.py``'s.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import glob
import logging
import math
import os
import random
from dataclasses import dataclass

import datasets
import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trainer import cli, runtime

logger = logging.getLogger(__name__)

IMDB = "stanfordnlp/imdb"  # the Hub id of the "imdb" dataset of Google's PyTorch walkthrough
SYNTHETIC = "synthetic"
SYNTHETIC_SIZES = {"train": 1024, "eval": 256}
HOLDOUT_FRACTION = 0.1  # evaluation share taken from --train-data files when --eval-data is unset
LABELS = "labels"  # the column name the Trainer and the model expect

_BUILDERS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
# A class with at most this many rows, and under RARE_LABEL_SHARE of them, looks like a typo
# (one "x" among thousands of 0/1 labels would train a 3-class model): it is refused unless
# --label-names lists it.
RARE_LABEL_ROWS = 5
RARE_LABEL_SHARE = 0.01
_READ_CHUNK = 1 << 20

POSITIVE_WORDS = (
    "good great excellent wonderful superb brilliant enjoyable delightful moving fun".split()
)
NEGATIVE_WORDS = "bad awful terrible boring dull poor weak horrible tedious mediocre".split()
FILLER_WORDS = (
    "the movie film plot story acting cast director scene scenes music script ending was is "
    "and but with a an of to in it this that very quite rather some long short first last "
    "character characters dialogue camera light sound performance audience minutes"
).split()


@dataclass
class RawData:
    """Untokenized train and eval sets plus the class names, indexed by label id."""

    train: datasets.Dataset
    eval: datasets.Dataset
    label_names: list[str]
    text_column: str
    label_column: str


def synthetic_examples(count: int, seed: int) -> dict[str, list]:
    """Review-like sentences whose sentiment words give the label away.

    Lengths are skewed like real reviews (most short, a few long), which is what makes
    dynamic padding pay off.
    """
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(count):
        label = rng.randrange(2)
        length = min(int(rng.paretovariate(1.2) * 8), 300)
        words = [rng.choice(FILLER_WORDS) for _ in range(length)]
        cues = POSITIVE_WORDS if label else NEGATIVE_WORDS
        for _ in range(1 + length // 12):
            words.insert(rng.randrange(len(words) + 1), rng.choice(cues))
        texts.append(" ".join(words).capitalize() + ".")
        labels.append(label)
    return {"text": texts, "label": labels}


def _synthetic(split: str, seed: int) -> datasets.Dataset:
    offset = 0 if split == "train" else 1_000_003
    examples = synthetic_examples(SYNTHETIC_SIZES[split], seed + offset)
    features = datasets.Features(
        {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])}
    )
    return datasets.Dataset.from_dict(examples, features=features)


def data_files(spec: str) -> list[str]:
    """The files a ``--*-data`` value names: a file, a folder of files, or a glob."""
    try:
        path = runtime.local_path(spec)
    except RuntimeError as error:
        raise cli.InputError(str(error)) from None
    if os.path.isdir(path):
        files = [
            os.path.join(path, name)
            for name in sorted(os.listdir(path))
            if os.path.splitext(name)[1].lower() in _BUILDERS
        ]
    else:
        files = sorted(glob.glob(path))
    if not files:
        raise cli.InputError(f"{spec}: no such file (expected CSV, JSON Lines or Parquet data)")
    return files


def check_text_file(path: str, header: bool) -> bool:
    """InputError unless the file is UTF-8 text: names the file and the line of the first
    undecodable byte (a latin-1 export, a binary file with a .csv name). Returns whether it
    has rows (a line after the ``header`` line, if it has one)."""
    shown = runtime.to_gcs_uri(path)
    decoder = codecs.getincrementaldecoder("utf-8")()
    line, has_rows, in_header = 1, False, header
    with open(path, "rb") as handle:
        while chunk := handle.read(_READ_CHUNK):
            if line == 1 and chunk.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
                raise cli.InputError(f"{shown}: line 1: UTF-16 text: save the file as UTF-8")
            if b"\x00" in chunk:
                line += chunk[: chunk.index(b"\x00")].count(b"\n")
                raise cli.InputError(
                    f"{shown}: line {line}: a NUL byte: this is a binary file, not CSV or JSON"
                    " Lines text"
                )
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as error:
                line += chunk[: error.start].count(b"\n")
                byte = chunk[error.start]
                raise cli.InputError(
                    f"{shown}: line {line}: byte 0x{byte:02x} is not UTF-8: save the file as"
                    " UTF-8 (e.g. iconv -f latin1 -t utf-8)"
                ) from None
            line += chunk.count(b"\n")
            body = chunk
            if in_header:
                in_header = b"\n" not in chunk
                body = b"" if in_header else chunk[chunk.index(b"\n") + 1 :]
            has_rows = has_rows or bool(body.strip())
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise cli.InputError(
                f"{shown}: line {line}: the file ends inside a UTF-8 character: save it as UTF-8"
            ) from None
    return has_rows


def column_names(path: str, kind: str) -> list[str]:
    """The column names as the file has them (``datasets`` would rename or drop a repeat)."""
    if kind == "parquet":
        return list(pq.read_schema(path).names)
    if kind == "csv":
        with open(path, encoding="utf-8-sig", newline="") as handle:
            return next(csv.reader(handle), [])
    return []  # JSON Lines: a repeated key is one key


def check_columns_are_unique(path: str, kind: str) -> None:
    names = column_names(path, kind)
    repeated = next((name for name in names if names.count(name) > 1), None)
    if repeated is not None:
        raise cli.InputError(
            f"{runtime.to_gcs_uri(path)}: column {repeated!r} appears twice in the header:"
            " name each column once"
        )


@contextlib.contextmanager
def _quiet_datasets():
    """``datasets`` logs an ERROR of its own before raising; the trainer's one line says it."""
    datasets_logger = logging.getLogger("datasets")
    level = datasets_logger.level
    datasets_logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        datasets_logger.setLevel(level)


def load_files(spec: str, text_column: str | None = None) -> datasets.Dataset:
    """One ``datasets.Dataset`` from CSV, JSON Lines or Parquet files.

    Each file is checked first (UTF-8 text, each column named once); ``text_column``, when
    given, is read as text even where every value looks like a number.
    """
    files = data_files(spec)
    kinds = {_BUILDERS.get(os.path.splitext(name)[1].lower()) for name in files}
    if None in kinds or len(kinds) != 1:
        raise cli.InputError(
            f"{spec}: use files of one format: .csv, .jsonl/.json or .parquet "
            f"(got {', '.join(sorted({os.path.basename(f) for f in files})[:5])})"
        )
    kind = kinds.pop()
    options = {}
    has_rows = kind == "parquet"  # an empty Parquet table is caught after loading
    for path in files:
        if kind != "parquet":
            has_rows = check_text_file(path, header=kind == "csv") or has_rows
        check_columns_are_unique(path, kind)
    if not has_rows:
        raise cli.InputError(f"{spec}: no examples (a header at most, no rows)")
    if kind == "csv" and text_column and text_column in column_names(files[0], kind):
        options["converters"] = {text_column: str}  # "007" stays "007", not 7
    try:
        with _quiet_datasets():
            dataset = datasets.load_dataset(kind, data_files=files, split="train", **options)
    except Exception as error:  # noqa: BLE001 - any parse error is the user's data, say so
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise cli.InputError(f"{spec}: cannot read the data ({first_line})") from None
    feature = dataset.features.get(text_column) if text_column else None
    if isinstance(feature, datasets.Value) and feature.dtype not in ("string", "large_string"):
        dataset = dataset.cast_column(text_column, datasets.Value("string"))
    return dataset


def _load(spec: str | None, split: str, seed: int, text_column: str) -> datasets.Dataset:
    if spec is None:
        return datasets.load_dataset(IMDB, split="train" if split == "train" else "test")
    if spec == SYNTHETIC:
        return _synthetic(split, seed)
    return load_files(spec, text_column)


def _check_columns(dataset: datasets.Dataset, spec: str, text: str, label: str) -> None:
    for column, flag in ((text, "--text-column"), (label, "--label-column")):
        if column not in dataset.column_names:
            raise cli.InputError(
                f"{spec}: no column {column!r} (columns: {', '.join(dataset.column_names)}); "
                f"set {flag}"
            )
    if len(dataset) == 0:
        raise cli.InputError(f"{spec}: no examples")


def _label_key(value):
    """Labels as read from files: ints stay ints, integral floats become ints, the rest str."""
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, bool):
        return int(value)
    return value


def drop_empty_texts(dataset: datasets.Dataset, spec: str, column: str) -> datasets.Dataset:
    """Rows whose text is empty, blank or missing teach nothing: dropped, with one line."""
    if not isinstance(dataset.features[column], datasets.Value):
        return dataset
    texts = dataset.with_format("arrow")[column]  # Arrow, not a Python list of every text
    blank = pc.equal(pc.utf8_trim_whitespace(texts), "")
    empty = np.asarray(pc.fill_null(pc.or_kleene(blank, pc.is_null(texts)), True))
    count = int(empty.sum())
    if not count:
        return dataset
    if count == len(dataset):
        raise cli.InputError(f"{spec}: every row has an empty {column!r}: no text to train on")
    first = int(np.flatnonzero(empty)[0])
    logger.warning(
        "%s: dropped %d of %d rows with an empty %r (the first is data row %d)",
        spec,
        count,
        len(dataset),
        column,
        first + 1,
    )
    return dataset.select(np.flatnonzero(~empty))


def _label_names(
    dataset: datasets.Dataset, spec: str, column: str, given: list[str] | None = None
) -> list[str]:
    """The classes in id order: ``given`` (``--label-names``), else the sorted label values."""
    feature = dataset.features[column]
    if isinstance(feature, datasets.ClassLabel):
        if given and sorted(given) != sorted(feature.names):
            raise cli.InputError(
                f"{spec}: --label-names {','.join(given)} do not match the dataset's classes"
                f" {','.join(feature.names)}"
            )
        return list(given or feature.names)
    labels = [_label_key(value) for value in dataset[column]]
    missing = [row for row, v in enumerate(labels) if v is None or _not_finite(v)]
    if missing:
        raise cli.InputError(
            f"{spec}: {len(missing)} rows have no {column!r} value (the first is data row"
            f" {missing[0] + 1})"
        )
    counts: dict = {}
    for value in labels:
        counts[value] = counts.get(value, 0) + 1
    if given:
        unlisted = next((row for row, v in enumerate(labels) if str(v) not in given), None)
        if unlisted is not None:
            raise cli.InputError(
                f"{spec}: data row {unlisted + 1}: label {str(labels[unlisted])!r} is not one"
                f" of --label-names {','.join(given)}"
            )
        return list(given)
    if len(counts) < 2:
        raise cli.InputError(
            f"{spec}: column {column!r} needs at least 2 classes, got {set(counts)}"
        )
    names = [str(value) for value in sorted(counts, key=lambda v: (isinstance(v, str), v))]
    rare = [
        v for v, n in counts.items() if n <= RARE_LABEL_ROWS and n < RARE_LABEL_SHARE * len(labels)
    ]
    if rare:
        value = min(rare, key=lambda v: counts[v])
        row = labels.index(value)
        raise cli.InputError(
            f"{spec}: data row {row + 1}: label {str(value)!r} occurs in only {counts[value]} of"
            f" {len(labels)} rows, a typo? Fix it, or list the classes to train on all of them:"
            f" --label-names {','.join(names)}"
        )
    return names


def _not_finite(value) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def label_mapper(label_names: list[str], feature):
    """A function from a label value as stored (class index, int, str) to the model's id."""
    ids = {name: index for index, name in enumerate(label_names)}

    def to_id(value) -> int:
        if isinstance(feature, datasets.ClassLabel):
            return ids[feature.int2str(value)]
        key = _label_key(value)
        if str(key) in ids:
            return ids[str(key)]
        if isinstance(key, int) and label_names == [str(i) for i in range(len(label_names))]:
            raise KeyError(value)
        if isinstance(key, int) and 0 <= key < len(label_names):
            return key  # numeric ids for named classes, e.g. 0/1 against ClassLabel neg/pos
        raise KeyError(value)

    return to_id


def describe(spec: str | None) -> str:
    return IMDB if spec is None else spec


def load_raw(args) -> RawData:
    """Load and check both splits; raises ``cli.InputError`` for anything wrong with them."""
    text, label = args.text_column, args.label_column
    train_name = describe(args.train_data)
    train = _load(args.train_data, "train", args.seed, text)
    _check_columns(train, train_name, text, label)
    train = drop_empty_texts(train, train_name, text)
    label_names = _label_names(train, train_name, label, getattr(args, "label_names", None))

    if args.eval_data is not None:
        eval_name = describe(args.eval_data)
        evaluation = _load(args.eval_data, "eval", args.seed, text)
        _check_columns(evaluation, eval_name, text, label)
        evaluation = drop_empty_texts(evaluation, eval_name, text)
    elif args.train_data in (None, SYNTHETIC):
        eval_name = f"{train_name} (evaluation split)"
        evaluation = _load(args.train_data, "eval", args.seed, text)
    else:
        eval_name = f"{train_name} (held-out {HOLDOUT_FRACTION:.0%})"
        if len(train) < 10:
            raise cli.InputError(
                f"{train_name}: too few examples to hold some out; set --eval-data"
            )
        parts = train.train_test_split(test_size=HOLDOUT_FRACTION, seed=args.seed)
        train, evaluation = parts["train"], parts["test"]
    _check_columns(evaluation, eval_name, text, label)

    to_id = label_mapper(label_names, evaluation.features[label])
    unknown = []
    for value in evaluation.unique(label):
        try:
            to_id(value)
        except KeyError:
            unknown.append(str(value))
    if unknown:
        raise cli.InputError(
            f"{eval_name}: labels {sorted(unknown)[:5]} do not occur in the training data"
        )

    train = _limit(train, args.max_train_samples, args.seed)
    evaluation = _limit(evaluation, args.max_eval_samples, args.seed)
    logger.info(
        "Data: %d training examples from %s, %d evaluation examples from %s, classes %s",
        len(train),
        train_name,
        len(evaluation),
        eval_name,
        label_names,
    )
    return RawData(train, evaluation, label_names, text, label)


def _limit(dataset: datasets.Dataset, count: int, seed: int) -> datasets.Dataset:
    """A seeded random subset (IMDB's files are sorted by label, so never just the first N)."""
    if count and count < len(dataset):
        return dataset.shuffle(seed=seed).select(range(count))
    return dataset


def tokenize(raw: RawData, tokenizer, max_length: int, pad_to_max_length: bool = False):
    """Tokenized (train, eval) datasets with ``input_ids``, ``attention_mask``, ``labels``."""

    def encoder(feature):
        to_id = label_mapper(raw.label_names, feature)

        def encode(batch):
            texts = ["" if value is None else str(value) for value in batch[raw.text_column]]
            encoded = tokenizer(
                texts,
                truncation=True,
                max_length=max_length,
                padding="max_length" if pad_to_max_length else False,
            )
            encoded[LABELS] = [to_id(value) for value in batch[raw.label_column]]
            return encoded

        return encode

    def apply(dataset: datasets.Dataset, name: str) -> datasets.Dataset:
        encode = encoder(dataset.features[raw.label_column])
        return dataset.map(
            encode, batched=True, remove_columns=dataset.column_names, desc=f"Tokenizing {name}"
        )

    return apply(raw.train, "train"), apply(raw.eval, "eval")
