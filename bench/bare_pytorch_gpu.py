"""The bare mixed-precision PyTorch loop on one GPU: the floor for the trainer's GPU throughput.

Same model folder, CSV, batch size and padding to ``--max-seq-length`` as the trainer's GPU
case; autocast to bf16 (fp16 with a gradient scaler where asked), fused AdamW, inputs
tokenized once and fed from pinned memory. No evaluation, checkpoints or gradient clipping.
Runs on the CPU where there is no GPU (only to check the script itself).
"""

from __future__ import annotations

import argparse
import csv
import sys

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--train-data", required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--max-seq-length", type=int, required=True)
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--precision", choices=["bf16", "fp16", "fp32"], default="bf16")
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"

    csv.field_size_limit(sys.maxsize)
    with open(args.train_data, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    encoded = tokenizer(
        [row["text"] for row in rows],
        truncation=True,
        max_length=args.max_seq_length,
        padding="max_length",
        return_tensors="pt",
    )
    labels = torch.tensor([int(row["label"]) for row in rows])
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(encoded["input_ids"], encoded["attention_mask"], labels),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        pin_memory=cuda,
    )
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2)
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, fused=cuda)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler(device, enabled=args.precision == "fp16")
    step = 0
    while step < args.max_steps:
        for input_ids, attention_mask, target in loader:
            with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
                loss = model(
                    input_ids=input_ids.to(device, non_blocking=True),
                    attention_mask=attention_mask.to(device, non_blocking=True),
                    labels=target.to(device, non_blocking=True),
                ).loss
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step == args.max_steps:
                break
    if cuda:
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
