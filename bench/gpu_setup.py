"""The GPU benchmark's inputs, made in seconds and deterministically (``gpu.py`` calls them).

``python bench/gpu_setup.py pytorch <folder> --train-size N --eval-size M [--tiny]`` writes
``train.csv``/``eval.csv`` (IMDB-shaped review lengths) and ``<folder>/model``: a BERT
classifier with random weights, BERT-base's shape (12 layers, hidden 768, 12 heads, 30,522
embedding rows; ``--tiny``: 2 layers, hidden 64, for the CPU check) and a ready 30,522-line
WordPiece vocabulary (special tokens, then generated pieces: nothing is trained). The Hub is
offline there, and the throughput of a step does not depend on the weights or the words.

``python bench/gpu_setup.py xgboost <folder> --train-size N --eval-size M`` writes a
HIGGS-shaped table (28 float features, a binary label) as Parquet, which both the trainer and
the bare loop read in about a second (a CSV of a million rows takes pandas ~15 s to write).

``python bench/gpu_setup.py peak`` prints the first visible GPU and its measured dense matmul
throughput (bf16 and fp16, 8192 x 8192 x 8192), a reference next to the vendor's peak.

The vocabulary and the texts use only the standard library (``vocabulary``, ``reviews``), so
the template's test suite checks them without PyTorch.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import os
import random

BERT_VOCAB_SIZE = 30522
# bert-base-uncased's layout: [PAD], 99 unused slots, [UNK] [CLS] [SEP] [MASK] at ids 0-103.
SPECIAL_TOKENS = ["[PAD]", *(f"[unused{i}]" for i in range(99)), "[UNK]", "[CLS]", "[SEP]"]
SPECIAL_TOKENS.append("[MASK]")
# Review lengths in words: a log-normal fitted to IMDB's reviews (median about 174 words, mean
# about 234, as bench/datagen.py); BERT's uncased WordPiece splits them into about 1.3 tokens a
# word, so each generated review has round(words x 1.3) single-token words: the same lengths in
# tokens as IMDB's under bert-base-uncased.
IMDB_LOG_MEDIAN_WORDS = math.log(174)
IMDB_LOG_SIGMA = 0.77
TOKENS_PER_WORD = 1.3
MAX_TOKENS = 3300  # IMDB's longest review, about 2,500 words
TEXT_WORDS = 8000  # the vocabulary's first whole words, Zipf-distributed, make the texts
CUES = (["awful", "boring", "terrible", "dull"], ["great", "superb", "moving", "fun"])


def vocabulary(size: int = BERT_VOCAB_SIZE) -> list[str]:
    """``size`` distinct WordPiece entries: the special tokens, the cue words, single letters
    and digits with their ``##`` forms, then made-up lowercase words and ``##`` suffixes."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = [*SPECIAL_TOKENS, *CUES[0], *CUES[1]]
    pieces += [*letters, *"0123456789", *(f"##{c}" for c in letters + "0123456789")]
    seen = set(pieces)
    rng = random.Random(30522)
    while len(pieces) < size:
        word = "".join(rng.choices(letters, k=rng.randint(3, 9)))
        if rng.random() < 0.2:
            word = "##" + word[:4]
        if word not in seen:
            seen.add(word)
            pieces.append(word)
    return pieces[:size]


def write_vocabulary(path: str, size: int = BERT_VOCAB_SIZE) -> list[str]:
    pieces = vocabulary(size)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(pieces) + "\n")
    return pieces


def reviews(count: int, seed: int, pieces: list[str]) -> tuple[list[str], list[int]]:
    """``count`` labelled texts of whole-word vocabulary entries, IMDB-shaped lengths in
    tokens; words Zipf-distributed, drawn in one ``random.choices`` call (no per-word loop)."""
    rng = random.Random(seed)
    words = [p for p in pieces if not p.startswith(("[", "##")) and len(p) > 1][:TEXT_WORDS]
    cumulative = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(words))))
    lengths = [
        max(
            8,
            min(
                MAX_TOKENS,
                round(TOKENS_PER_WORD * rng.lognormvariate(IMDB_LOG_MEDIAN_WORDS, IMDB_LOG_SIGMA)),
            ),
        )
        for _ in range(count)
    ]
    drawn = rng.choices(words, cum_weights=cumulative, k=sum(lengths))
    labels = [rng.randrange(2) for _ in range(count)]
    texts, start = [], 0
    for length, label in zip(lengths, labels, strict=True):
        chunk = drawn[start : start + length]
        chunk[0] = CUES[label][length % 4]  # a cue word carries the label
        texts.append(" ".join(chunk))
        start += length
    return texts, labels


def token_lengths(texts: list[str], limit: int) -> dict:
    """Tokens per review with [CLS] and [SEP] (every word is one vocabulary entry)."""
    lengths = sorted(len(text.split()) + 2 for text in texts)
    kept = [min(length, limit) for length in lengths]
    return {
        "tokens_median": lengths[len(lengths) // 2],
        "tokens_mean": round(sum(lengths) / len(lengths), 1),
        "tokens_p95": lengths[int(0.95 * (len(lengths) - 1))],
        "tokens_max": lengths[-1],
        f"share_padding_at_{limit}_if_padded_to_max": round(1 - sum(kept) / (limit * len(kept)), 3),
    }


def write_csv(path: str, texts: list[str], labels: list[int]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(zip(texts, labels, strict=True))


def review_files(folder: str, train_size: int, eval_size: int) -> tuple[list[str], dict]:
    """train.csv, eval.csv and model/vocab.txt: the standard-library part of the set-up."""
    model_dir = os.path.join(folder, "model")
    os.makedirs(model_dir, exist_ok=True)
    pieces = write_vocabulary(os.path.join(model_dir, "vocab.txt"))
    texts, labels = reviews(train_size, 1, pieces)
    write_csv(os.path.join(folder, "train.csv"), texts, labels)
    write_csv(os.path.join(folder, "eval.csv"), *reviews(eval_size, 2, pieces))
    info = {"train_examples": train_size, "eval_examples": eval_size}
    return pieces, info | token_lengths(texts, 512)


def pytorch(folder: str, train_size: int, eval_size: int, tiny: bool) -> dict:
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    pieces, info = review_files(folder, train_size, eval_size)
    model_dir = os.path.join(folder, "model")
    # From a tokenizer.json: transformers 5 ignores BertTokenizerFast(vocab_file=...).
    wordpiece = BertWordPieceTokenizer(os.path.join(model_dir, "vocab.txt"), lowercase=True)
    wordpiece.save(os.path.join(model_dir, "tokenizer.json"))
    tokenizer = BertTokenizerFast(
        tokenizer_file=os.path.join(model_dir, "tokenizer.json"), model_max_length=512
    )
    tokenizer.save_pretrained(model_dir)
    shape = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2} if tiny else {}
    if tiny:
        shape["intermediate_size"] = 256
    config = BertConfig(vocab_size=len(pieces), num_labels=2, **shape)  # else bert-base's shape
    model = BertForSequenceClassification(config)
    model.save_pretrained(model_dir)
    params = sum(p.numel() for p in model.parameters())
    # Embedding lookups are no matrix products: model FLOPs count the other parameters.
    embedding = sum(p.numel() for n, p in model.named_parameters() if ".embeddings." in n)
    info["model"] = {
        "model": ("tiny BERT" if tiny else "BERT-base shape") + ", random weights",
        "layers": config.num_hidden_layers,
        "hidden": config.hidden_size,
        "heads": config.num_attention_heads,
        "intermediate": config.intermediate_size,
        "vocab_size": config.vocab_size,
        "tokenizer_vocab": len(tokenizer),
        "params": params,
        "non_embedding_params": params - embedding,
    }
    return info


def xgboost(folder: str, train_size: int, eval_size: int, features: int = 28) -> dict:
    """A HIGGS-shaped binary table (as bench/datagen.py), written as Parquet."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    for split, count in (("train", train_size), ("eval", eval_size)):
        x = rng.normal(size=(count, features)).astype("float32")
        score = x[:, 0] * x[:, 1] + np.sin(x[:, 2]) + 0.5 * x[:, 3] + rng.normal(size=count)
        frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(features)])
        frame["label"] = (score > 0).astype("int64")
        frame.to_parquet(os.path.join(folder, f"{split}.parquet"), index=False)
    return {"train_examples": train_size, "eval_examples": eval_size, "features": features}


def matmul_tflops(dtype, size: int = 8192, iterations: int = 50) -> float:
    import torch

    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    for _ in range(5):  # warm-up: cuBLAS picks its kernel, clocks ramp up
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        a @ b
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000
    return round(2 * size**3 * iterations / seconds / 1e12, 1)


def peak() -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"cuda": False, "torch": torch.__version__, "torch_cuda": torch.version.cuda}
    major, minor = torch.cuda.get_device_capability(0)
    return {
        "cuda": True,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "name": torch.cuda.get_device_name(0),
        "capability": f"{major}.{minor}",
        "native_bf16": major >= 8,
        "matmul_bf16_tflops": matmul_tflops(torch.bfloat16),
        "matmul_fp16_tflops": matmul_tflops(torch.float16),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["pytorch", "xgboost", "peak"])
    parser.add_argument("folder", nargs="?")
    parser.add_argument("--train-size", type=int, default=0)
    parser.add_argument("--eval-size", type=int, default=0)
    parser.add_argument("--tiny", action="store_true", help="pytorch: a 2-layer, hidden-64 BERT")
    args = parser.parse_args()
    if args.what == "peak":
        print(json.dumps(peak()))
        return
    if not args.folder or args.train_size < 1 or args.eval_size < 1:
        parser.error(f"{args.what} needs a folder, --train-size and --eval-size (both >= 1)")
    os.makedirs(args.folder, exist_ok=True)
    if args.what == "pytorch":
        info = pytorch(args.folder, args.train_size, args.eval_size, args.tiny)
    else:
        info = xgboost(args.folder, args.train_size, args.eval_size)
    with open(os.path.join(args.folder, "data.json"), "w", encoding="utf-8") as handle:
        json.dump(info, handle, indent=1)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
