"""YOURS TO CHANGE: the text-classification data: IMDB by default, CSV/JSONL/Parquet files
(read and checked by ``vertex_trainer_runtime.torch.input_files``), or a synthetic set;
``tokenize`` prepares it for the model.

Everything goes through ``datasets`` (memory-mapped Arrow, cached batched ``map``); examples are
padded per batch by the collator, not here. Class labels: ``labels.py``.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

import datasets
import numpy as np
import pyarrow.compute as pc
from vertex_trainer_runtime import cli
from vertex_trainer_runtime.torch.input_files import load_files

from trainer.flags import Data
from trainer.labels import class_names, label_mapper

logger = logging.getLogger(__name__)

IMDB = "stanfordnlp/imdb"  # the Hub id of the "imdb" dataset of Google's PyTorch walkthrough
SYNTHETIC = "synthetic"
SYNTHETIC_SIZES = {"train": 1024, "eval": 256}
SYNTHETIC_NOISE = 0.3  # share of synthetic texts with one sentiment word of the other class
HOLDOUT_FRACTION = 0.1  # evaluation share taken from --train-data files when --eval-data is unset
LABELS = "labels"  # the column name the Trainer and the model expect

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
    """Review-like sentences whose sentiment words (the majority, 30% noise) give the label away,
    with skewed lengths like real reviews; the same count and seed give the same texts."""
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(count):
        label = rng.randrange(2)
        length = min(int(rng.paretovariate(1.2) * 8), 300)
        words = [rng.choice(FILLER_WORDS) for _ in range(length)]
        cues, others = (
            (POSITIVE_WORDS, NEGATIVE_WORDS) if label else (NEGATIVE_WORDS, POSITIVE_WORDS)
        )
        for _ in range(2 + length // 12):
            words.insert(rng.randrange(len(words) + 1), rng.choice(cues))
        if rng.random() < SYNTHETIC_NOISE:
            words.insert(rng.randrange(len(words) + 1), rng.choice(others))
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


def describe(spec: str | None) -> str:
    return IMDB if spec is None else spec


def make_data(flags) -> RawData:
    """The run's data (``SPEC.make_data``): both splits of the flags, checked."""
    return load_raw(flags.shared, flags.data)


def load_raw(shared: cli.SharedFlags, section: Data) -> RawData:
    """Load and check both splits; raises ``cli.InputError`` for anything wrong with them."""
    text, label, seed = section.text_column, section.label_column, shared.seed
    train_name = describe(shared.train_data)
    train = _load(shared.train_data, "train", seed, text)
    _check_columns(train, train_name, text, label)
    train = drop_empty_texts(train, train_name, text)
    label_names = class_names(train, train_name, label, section.label_names)
    train, evaluation, eval_name = _evaluation_split(shared, section, train, train_name)
    _check_columns(evaluation, eval_name, text, label)
    _check_eval_labels(evaluation, eval_name, label, label_names)

    train = _limit(train, section.max_train_samples, seed)
    evaluation = _limit(evaluation, section.max_eval_samples, seed)
    logger.info(
        "Data: %d training examples from %s, %d evaluation examples from %s, classes %s",
        len(train),
        train_name,
        len(evaluation),
        eval_name,
        label_names,
    )
    return RawData(train, evaluation, label_names, text, label)


def _evaluation_split(shared: cli.SharedFlags, section: Data, train, train_name: str):
    """(train, eval, eval's name): --eval-data, the built-in eval split, or a held-out share."""
    text, seed = section.text_column, shared.seed
    if shared.eval_data is not None:
        eval_name = describe(shared.eval_data)
        evaluation = _load(shared.eval_data, "eval", seed, text)
        _check_columns(evaluation, eval_name, text, section.label_column)
        return train, drop_empty_texts(evaluation, eval_name, text), eval_name
    if shared.train_data in (None, SYNTHETIC):
        evaluation = _load(shared.train_data, "eval", seed, text)
        return train, evaluation, f"{train_name} (evaluation split)"
    if len(train) < 10:
        raise cli.InputError(f"{train_name}: too few examples to hold some out; set --eval-data")
    parts = train.train_test_split(test_size=HOLDOUT_FRACTION, seed=seed)
    return parts["train"], parts["test"], f"{train_name} (held-out {HOLDOUT_FRACTION:.0%})"


def _check_eval_labels(evaluation, eval_name: str, label: str, label_names: list[str]) -> None:
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


def _limit(dataset: datasets.Dataset, count: int, seed: int) -> datasets.Dataset:
    """A seeded random subset (IMDB's files are sorted by label, so never just the first N)."""
    if count and count < len(dataset):
        return dataset.shuffle(seed=seed).select(range(count))
    return dataset


def tokenize_for(flags, raw: RawData, tokenizer):
    """``SPEC.tokenize``: the (train, eval) sets as ``--max-seq-length`` and padding say."""
    return tokenize(raw, tokenizer, flags.data.max_seq_length, flags.data.pad_to_max_length)


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
