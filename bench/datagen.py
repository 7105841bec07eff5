"""Benchmark inputs, generated offline and deterministically: one function per framework.

Run with the framework's own environment (``python bench/datagen.py <framework> <folder>``),
so each dataset is written with the libraries that will read it. Every trainer, bare loop and
sample pattern of a framework then reads exactly these files.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random

# Review lengths in words follow a log-normal fitted to IMDB's 50k reviews (median about 174
# words, mean about 234): most are short, a long tail reaches thousands of words.
IMDB_LOG_MEDIAN = math.log(174)
IMDB_LOG_SIGMA = 0.77
MAX_WORDS = 2500
# Raised whenever the generated files change, so that bench/run.py generates them again.
VERSION = 3
# The first reviews of train.csv again, for the cases whose steps are long (bench/run.py).
SHORT_TRAIN_SIZE = 256


def pseudo_words(rng: random.Random, count: int) -> list[str]:
    """A made-up vocabulary whose frequency follows Zipf's law, like real text."""
    letters = "etaoinshrdlucmfwypvbgkqjxz"
    words = set()
    while len(words) < count:
        length = rng.randint(2, 9)
        words.add("".join(rng.choice(letters[: 10 + length * 2]) for _ in range(length)))
    return sorted(words)


def review_texts(count: int, seed: int) -> tuple[list[str], list[int]]:
    """Labelled review-like texts with IMDB-shaped lengths; cue words carry the label."""
    rng = random.Random(seed)
    vocabulary = pseudo_words(random.Random(0), 4000)
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
    cues = (["awful", "boring", "terrible", "dull"], ["great", "superb", "moving", "fun"])
    texts, labels = [], []
    for _ in range(count):
        label = rng.randrange(2)
        length = int(min(MAX_WORDS, max(10, rng.lognormvariate(IMDB_LOG_MEDIAN, IMDB_LOG_SIGMA))))
        words = rng.choices(vocabulary, weights=weights, k=length)
        for _ in range(1 + length // 20):
            words[rng.randrange(length)] = rng.choice(cues[label])
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


def write_csv(path: str, texts: list[str], labels: list[int]) -> None:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(zip(texts, labels, strict=True))


def padding_shares(lengths: list[int], batch: int, seed: int = 0) -> dict:
    """The share of padding tokens per padding scheme, at 128 and 512 tokens, batches of
    ``batch``: every example to the maximum length (the walkthrough), each random batch to
    its longest example (dynamic), and batches of similar lengths (length-grouped)."""
    shuffled = list(lengths)
    random.Random(seed).shuffle(shuffled)
    shares = {}
    for limit in (128, 512):
        real = [min(length, limit) for length in shuffled]

        def padded(order: list[int]) -> int:
            batches = [order[i : i + batch] for i in range(0, len(order), batch)]
            return sum(len(b) * max(b) for b in batches)

        shares[str(limit)] = {
            "max_length": round(1 - sum(real) / (len(real) * limit), 3),
            "dynamic": round(1 - sum(real) / padded(real), 3),
            "length_grouped": round(1 - sum(real) / padded(sorted(real)), 3),
        }
    return shares


def wordpiece_tokenizer(texts: list[str], model_dir: str, vocab_size: int):
    """A BERT tokenizer with a WordPiece vocabulary trained on ``texts``, saved in ``model_dir``.

    Loaded from a tokenizer.json, not ``BertTokenizerFast(vocab_file=...)``: transformers 5
    ignores ``vocab_file`` there and leaves 5 special tokens, every word then [UNK].
    """
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    os.makedirs(model_dir, exist_ok=True)
    trainer = BertWordPieceTokenizer(lowercase=True)
    trainer.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2)
    trainer.save_model(model_dir)
    # Built again from the vocabulary: only then does it add [CLS] and [SEP].
    wordpiece = BertWordPieceTokenizer(os.path.join(model_dir, "vocab.txt"), lowercase=True)
    wordpiece.save(os.path.join(model_dir, "tokenizer.json"))
    tokenizer = BertTokenizerFast(
        tokenizer_file=os.path.join(model_dir, "tokenizer.json"), model_max_length=512
    )
    tokenizer.save_pretrained(model_dir)
    return tokenizer


def pytorch(folder: str, train_size: int, eval_size: int) -> dict:
    """CSV reviews plus a tiny BERT (random weights, WordPiece vocab trained on the texts)."""
    from transformers import BertConfig, BertForSequenceClassification

    texts, labels = review_texts(train_size, seed=1)
    eval_texts, eval_labels = review_texts(eval_size, seed=2)
    write_csv(os.path.join(folder, "train.csv"), texts, labels)
    short = min(SHORT_TRAIN_SIZE, train_size)
    write_csv(os.path.join(folder, "train-short.csv"), texts[:short], labels[:short])
    write_csv(os.path.join(folder, "eval.csv"), eval_texts, eval_labels)

    model_dir = os.path.join(folder, "tiny-bert")
    tokenizer = wordpiece_tokenizer(texts, model_dir, vocab_size=2000)
    # The tiny BERT (2 layers, hidden 64: steps of tens of ms, where any fixed per-step cost
    # shows) and a small one (4 layers, hidden 256: steps of hundreds of ms on one CPU thread,
    # nearer the models users fine-tune); both share the vocabulary.
    for name, layers, hidden in (("tiny-bert", 2, 64), ("small-bert", 4, 256)):
        directory = os.path.join(folder, name)
        if name != "tiny-bert":
            tokenizer.save_pretrained(directory)
        config = BertConfig(
            vocab_size=tokenizer.vocab_size,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=hidden // 32,
            intermediate_size=4 * hidden,
            max_position_embeddings=512,
            num_labels=2,
        )
        BertForSequenceClassification(config).save_pretrained(directory)
    lengths = [len(ids) for ids in tokenizer(texts, truncation=False)["input_ids"]]
    shares = padding_shares(lengths, batch=16)
    lengths.sort()
    return {
        "train_examples": train_size,
        "train_examples_short": short,
        "eval_examples": eval_size,
        "tokens_median": lengths[len(lengths) // 2],
        "tokens_mean": round(sum(lengths) / len(lengths), 1),
        "tokens_p95": lengths[int(len(lengths) * 0.95)],
        "tokens_max": lengths[-1],
        "model": "BERT, 2 layers, hidden 64, 2 heads, WordPiece vocab 2000",
        "model_small": "BERT, 4 layers, hidden 256, 8 heads, WordPiece vocab 2000",
        "padding_share_batch_16": shares,
    }


def keras(folder: str, train_size: int, eval_size: int, image_size: int = 64) -> dict:
    """JPEG images in one sub-folder per class (the layout the Keras trainer reads)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    colours = rng.uniform(0, 255, size=(2, 3))
    for split, count in (("train", train_size), ("eval", eval_size)):
        for index in range(count):
            label = index % 2
            noise = rng.uniform(0, 255, size=(image_size, image_size, 3))
            pixels = (0.6 * colours[label] + 0.4 * noise).astype("uint8")
            class_dir = os.path.join(folder, split, f"class_{label}")
            os.makedirs(class_dir, exist_ok=True)
            tf.io.write_file(
                os.path.join(class_dir, f"{index:06d}.jpg"), tf.io.encode_jpeg(pixels, quality=90)
            )
    return {"train_examples": train_size, "eval_examples": eval_size, "image_size": image_size}


def xgboost(folder: str, train_size: int, eval_size: int, features: int = 28) -> dict:
    """A HIGGS-shaped binary table: dense float features, a label from a noisy rule."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    for split, count in (("train", train_size), ("eval", eval_size)):
        x = rng.normal(size=(count, features)).astype("float32")
        score = x[:, 0] * x[:, 1] + np.sin(x[:, 2]) + 0.5 * x[:, 3] + rng.normal(size=count)
        frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(features)])
        frame["label"] = (score > 0).astype("int64")
        frame.to_csv(os.path.join(folder, f"{split}.csv"), index=False)
    return {"train_examples": train_size, "eval_examples": eval_size, "features": features}


GENERATORS = {"pytorch": pytorch, "keras": keras, "xgboost": xgboost}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("framework", choices=sorted(GENERATORS))
    parser.add_argument("folder")
    parser.add_argument("--train-size", type=int, required=True)
    parser.add_argument("--eval-size", type=int, required=True)
    args = parser.parse_args()
    os.makedirs(args.folder, exist_ok=True)
    info = GENERATORS[args.framework](args.folder, args.train_size, args.eval_size)
    info["version"] = VERSION
    with open(os.path.join(args.folder, "data.json"), "w", encoding="utf-8") as handle:
        json.dump(info, handle, indent=1)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
