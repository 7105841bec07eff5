"""How batches are padded, as little as each needs.

Compiling pads to multiples of 64 (``torch.compile`` specializes on shapes: one graph per
length); an unpadded batch goes without its attention mask, so attention keeps its flash kernel.
"""

from __future__ import annotations

from transformers import DataCollatorWithPadding

COMPILED_PADDING_MULTIPLE = 64
MIXED_PRECISION_PADDING_MULTIPLE = 8  # tensor cores work on multiples of 8 in fp16/bf16


def padding_multiple(compiled: bool, mixed_precision: bool) -> int | None:
    if compiled:
        return COMPILED_PADDING_MULTIPLE
    return MIXED_PRECISION_PADDING_MULTIPLE if mixed_precision else None


class PaddingCollator(DataCollatorWithPadding):
    """``DataCollatorWithPadding`` that leaves out the attention mask of an unpadded batch.

    Runs on the host (in the data loader workers where there are any), so the check costs the
    GPU nothing.
    """

    def __call__(self, features):
        batch = super().__call__(features)
        mask = batch.get("attention_mask")
        if mask is not None and bool(mask.all()):
            del batch["attention_mask"]
        return batch
