"""The bare PyTorch baseline: a plain training loop, nothing else.

Same BERT, same CSV, same batch size, same dynamic padding as the generated trainer, but
no Trainer, no checkpoints, no metric reporting: the floor the trainer's overhead is measured
against. With ``--eval-data`` it also does the work the trainer's defaults ask for besides
training: accuracy on every eval example at the end of each epoch (batches of twice the
training batch, as the trainer's ``--eval-batch-size`` default), so that the ratio measures
what the trainer adds, not the evaluation a user asked for.
"""

from __future__ import annotations

import argparse
import csv

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--train-data", required=True)
    parser.add_argument("--eval-data", default=None, help="evaluate on it after each epoch")
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--max-seq-length", type=int, required=True)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    torch.manual_seed(args.seed)

    tokenizer = AutoTokenizer.from_pretrained(args.model)

    def loader(path: str, batch_size: int, shuffle: bool):
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        encoded = tokenizer(
            [row["text"] for row in rows], truncation=True, max_length=args.max_seq_length
        )
        # Every tokenizer output (BERT's token_type_ids too), as the trainer feeds the model.
        examples = [
            {**{key: values[index] for key, values in encoded.items()}, "labels": int(row["label"])}
            for index, row in enumerate(rows)
        ]
        return torch.utils.data.DataLoader(
            examples,
            batch_size=batch_size,
            shuffle=shuffle,
            collate_fn=lambda batch: tokenizer.pad(batch, return_tensors="pt"),
        )

    train = loader(args.train_data, args.batch_size, shuffle=True)
    evaluation = loader(args.eval_data, 2 * args.batch_size, False) if args.eval_data else None
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    for _ in range(args.epochs):
        model.train()
        for batch in train:
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        if evaluation is not None:
            model.eval()
            correct = 0
            with torch.no_grad():
                for batch in evaluation:
                    predicted = model(**batch).logits.argmax(dim=-1)
                    correct += int((predicted == batch["labels"]).sum())
            print(f"eval accuracy {correct / len(evaluation.dataset):.4f}")


if __name__ == "__main__":
    main()
