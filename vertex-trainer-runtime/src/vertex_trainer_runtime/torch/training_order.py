"""Each epoch's training order is a function of the seed and
the epoch only, the same on every rank and again after a resume (transformers' samplers draw
from the global RNG, which differs between ranks and is restored only after the order is drawn).
"""

from __future__ import annotations

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_pt_utils import get_length_grouped_indices


class EpochOrder(torch.utils.data.Sampler):
    """The order of one epoch, drawn from its own generator seeded with ``seed + epoch`` (as
    accelerate seeds its sampler): every rank draws the same order, also after a mid-epoch resume
    (the global RNG drifts per rank with dropout). With ``lengths``: transformers' length grouping
    into batches of ``batch_size``."""

    def __init__(self, size: int, seed: int, lengths: list[int] | None = None, batch_size: int = 1):
        if lengths is not None and len(lengths) != size:
            raise ValueError(f"{len(lengths)} lengths for {size} examples")
        self.size = size
        self.seed = seed
        self.lengths = lengths
        self.batch_size = batch_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Called before each epoch (by ``SetOrderEpoch``, and by accelerate where it can)."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def indices(self) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        if self.lengths is None:
            return torch.randperm(self.size, generator=generator).tolist()
        return get_length_grouped_indices(self.lengths, self.batch_size, generator=generator)

    def __iter__(self):
        return iter(self.indices())


class SetOrderEpoch(TrainerCallback):
    """Tells the order which epoch starts (the whole part of ``state.epoch``, also right after a
    resume): transformers and accelerate forward ``set_epoch`` in some setups, not in all."""

    def __init__(self):
        self.order: EpochOrder | None = None

    def on_epoch_begin(self, args, state, control, **kwargs):
        if self.order is not None:
            self.order.set_epoch(int(state.epoch or 0))
        return control


def groups_by_length(training_args: TrainingArguments) -> bool:
    """Whether these arguments ask for length-grouped batches (either transformers spelling)."""
    strategy = getattr(training_args, "train_sampling_strategy", None)
    return strategy == "group_by_length" or bool(getattr(training_args, "group_by_length", False))


class SeededOrderTrainer(Trainer):
    """``Trainer`` with :class:`EpochOrder`: ``skip_first_batches`` skips exactly the batches a
    resumed run already trained."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.order_epoch = SetOrderEpoch()
        self.add_callback(self.order_epoch)

    def _get_train_sampler(self, train_dataset=None):
        # Newer transformers pass the dataset, older ones nothing: the same dataset either way.
        dataset = self.train_dataset if train_dataset is None else train_dataset
        lengths = None
        if groups_by_length(self.args):
            column = self.processing_class.model_input_names[0]
            lengths = [len(ids) for ids in dataset[column]]
        order = EpochOrder(
            len(dataset),
            self.args.seed,
            lengths,
            self.args.train_batch_size * self.args.gradient_accumulation_steps,
        )
        self.order_epoch.order = order
        return order
