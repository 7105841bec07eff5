"""YOURS TO CHANGE: ``python -m trainer.predict --model-dir DIR "text" ...`` classifies texts
with an exported model and prints one JSON line per text (text, label, probability).

Texts come from the command line or ``--input-file`` (.txt, one per line, or the
``--text-column`` of a CSV, JSON Lines or Parquet file).
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from transformers import AutoModelForSequenceClassification
from vertex_trainer_runtime import cli
from vertex_trainer_runtime.torch import input_files

from trainer import model as models


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(prog="python -m trainer.predict", description=__doc__)
    result.add_argument("texts", nargs="*", help="texts to classify")
    result.add_argument("--model-dir", required=True, help="folder written by the trainer")
    result.add_argument("--input-file", default=None, help=".txt (one per line), CSV, JSONL...")
    result.add_argument("--text-column", default="text", help="column of --input-file tables")
    result.add_argument("--batch-size", type=cli.positive_integer, default=32)
    result.add_argument("--max-seq-length", type=cli.positive_integer, default=512)
    return result


def read_texts(path: str, text_column: str) -> list[str]:
    if path.lower().endswith(".txt"):
        with open(input_files.data_files(path)[0], encoding="utf-8") as handle:
            return [line.rstrip("\n") for line in handle if line.strip()]
    table = input_files.load_files(path)
    if text_column not in table.column_names:
        raise cli.InputError(f"{path}: no column {text_column!r}; set --text-column")
    return ["" if text is None else str(text) for text in table[text_column]]


def predict(model, tokenizer, texts: list[str], batch_size: int = 32, max_length: int = 512):
    """(label, probability) for each text."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device).eval()
    results = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(
            texts[start : start + batch_size],
            truncation=True,
            max_length=min(max_length, tokenizer.model_max_length),
            padding=True,
            return_tensors="pt",
        ).to(device)
        with torch.inference_mode():
            probabilities = model(**batch).logits.softmax(dim=-1)
        scores, ids = probabilities.max(dim=-1)
        for score, index in zip(scores.tolist(), ids.tolist(), strict=True):
            results.append((model.config.id2label[index], score))
    return results


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        texts = list(args.texts)
        if args.input_file:
            texts += read_texts(args.input_file, args.text_column)
        if not texts:
            raise cli.InputError("nothing to classify: give texts or --input-file")
        tokenizer = models.load_tokenizer(args.model_dir)
        model = AutoModelForSequenceClassification.from_pretrained(models.resolve(args.model_dir))
    except (cli.InputError, OSError) as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 2
    results = predict(model, tokenizer, texts, args.batch_size, args.max_seq_length)
    for text, (label, score) in zip(texts, results, strict=True):
        print(json.dumps({"text": text, "label": label, "score": round(score, 6)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
