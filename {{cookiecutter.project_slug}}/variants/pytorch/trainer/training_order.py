"""The training order: each epoch's is a function of the seed and the epoch, nothing else.

transformers' own samplers draw from the global RNG, which differs between ranks and is
restored only after a resume has drawn its order; :class:`SeededOrderTrainer` replaces them with
:class:`EpochOrder`, so every rank trains on one order and a resumed run skips exactly the
batches already trained.
"""

from __future__ import annotations

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_pt_utils import get_length_grouped_indices


class EpochOrder(torch.utils.data.Sampler):
    """The order of one training epoch: a function of the seed and the epoch, nothing else.

    transformers' samplers draw each epoch's permutation from the global torch RNG, which
    dropout draws from too. Under DDP each rank's RNG drifts (dropout draws in proportion to the
    padded width of its batches), so the ranks dealt batches from different permutations: some
    examples twice in an epoch, others never. And on a mid-epoch resume the order was drawn
    before the RNG state was restored, so the batches skipped were not those already trained.
    Here every rank draws the same order from its own generator, seeded with ``seed + epoch``
    (as accelerate seeds its random sampler); accelerate deals each rank its share of the
    batches. With ``lengths`` the order groups examples of similar length into batches of
    ``batch_size`` (transformers' length grouping, the same permutation and mega-batches).
    """

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
    """Tells the training order which epoch starts, before the epoch's first batch is drawn.

    ``state.epoch`` counts finished epochs plus the finished share of the current one, also
    right after a mid-epoch resume, so its whole part is the epoch that starts. transformers
    and accelerate forward ``set_epoch`` to a sampler in some versions and setups but not in all
    (not through accelerate's batch sampler shards under DDP, for one): this works in all.
    """

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
    """``Trainer`` whose training order depends only on ``args.seed`` and the epoch.

    The same order on every rank, with and without length grouping, and the same again after a
    resume, so ``skip_first_batches`` skips exactly the batches already trained
    (see ``EpochOrder``).
    """

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
