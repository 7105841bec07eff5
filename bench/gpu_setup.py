"""The GPU benchmark's helpers that run in the PyTorch environment (``gpu.py`` calls them).

``python bench/gpu_setup.py bert-base <data folder>`` writes ``<folder>/bert-base``: a
classifier with BERT-base's shape (12 layers, hidden 768, 12 heads, feed-forward 3072, 30,522
embedding rows, 512 positions) and random weights, since the Hub is offline, with a WordPiece
vocabulary trained on ``<folder>/train.csv``; it prints the parameter counts as JSON.

``python bench/gpu_setup.py peak`` prints the first visible GPU and its measured dense matmul
throughput (bf16 and fp16, 8192 x 8192 x 8192), a reference next to the vendor's peak.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys


def bert_base(folder: str) -> dict:
    from datagen import wordpiece_tokenizer  # bench/datagen.py, next to this file
    from transformers import BertConfig, BertForSequenceClassification

    csv.field_size_limit(sys.maxsize)
    with open(os.path.join(folder, "train.csv"), newline="", encoding="utf-8") as handle:
        texts = [row["text"] for row in csv.DictReader(handle)]
    model_dir = os.path.join(folder, "bert-base")
    tokenizer = wordpiece_tokenizer(texts, model_dir, vocab_size=30522)
    config = BertConfig(num_labels=2)  # the defaults are bert-base-uncased's shape
    model = BertForSequenceClassification(config)
    model.save_pretrained(model_dir)
    params = sum(p.numel() for p in model.parameters())
    # Embedding lookups are no matrix products: model FLOPs count the other parameters.
    embedding = sum(p.numel() for n, p in model.named_parameters() if ".embeddings." in n)
    return {
        "model": "BERT-base shape, random weights",
        "layers": config.num_hidden_layers,
        "hidden": config.hidden_size,
        "heads": config.num_attention_heads,
        "intermediate": config.intermediate_size,
        "vocab_size": config.vocab_size,
        "tokenizer_vocab": len(tokenizer),
        "params": params,
        "non_embedding_params": params - embedding,
    }


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
    parser.add_argument("what", choices=["bert-base", "peak"])
    parser.add_argument("folder", nargs="?")
    args = parser.parse_args()
    if args.what == "bert-base":
        if not args.folder:
            parser.error("bert-base needs the data folder")
        info = bert_base(args.folder)
        with open(os.path.join(args.folder, "bert-base.json"), "w", encoding="utf-8") as handle:
            json.dump(info, handle, indent=1)
    else:
        info = peak()
    print(json.dumps(info))


if __name__ == "__main__":
    main()
