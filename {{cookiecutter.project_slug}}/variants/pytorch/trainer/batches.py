"""How training batches are padded: as little as each batch needs, in lengths a compiled model
reuses, and without an attention mask when nothing is padded.

``torch.compile`` specializes on shapes: every new batch length would compile again (about a
minute on a GPU). Padding to multiples of 64 when compiling bounds the lengths to
``max_seq_length / 64`` graphs, compiled once each (the length-grouped sampler makes most
batches close to a multiple anyway). A batch with no padding goes without its attention mask:
PyTorch's scaled-dot-product attention then keeps its fastest (flash) kernel, which a mask rules
out, and transformers need not look at the mask to find that out (a wait for the GPU).
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
