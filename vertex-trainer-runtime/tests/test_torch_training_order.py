"""vertex_trainer_runtime.torch.training_order: an epoch's order is a function of seed and
epoch only, the same on every rank and after a resume."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from vertex_trainer_runtime.torch import training_order  # noqa: E402

ROWS = 101  # odd: no batch size divides it
BATCH_SIZE = 8


@pytest.mark.parametrize("grouped", [True, False], ids=["group-by-length", "random"])
def test_epoch_order_depends_on_seed_and_epoch_only(grouped):
    """Whatever the global RNG went through (dropout draws differ per rank), the order is the
    same for the same seed and epoch: a permutation, another one each epoch."""
    lengths = [(7 * i) % 23 + 1 for i in range(ROWS)] if grouped else None

    def order(epoch: int, rng_draws: int) -> list[int]:
        torch.rand(rng_draws)  # moves the global RNG, as a rank's dropout does
        sampler = training_order.EpochOrder(ROWS, seed=42, lengths=lengths, batch_size=BATCH_SIZE)
        sampler.set_epoch(epoch)
        return list(sampler)

    first = order(1, rng_draws=3)
    assert first == order(1, rng_draws=1000)
    assert sorted(first) == list(range(ROWS))
    assert order(2, rng_draws=5) != first
    if grouped:  # each batch holds similar lengths: spreads far below the whole set's
        batches = [first[i : i + BATCH_SIZE] for i in range(0, ROWS, BATCH_SIZE)]
        spreads = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches]
        assert sum(spreads) / len(spreads) < (max(lengths) - min(lengths)) / 2
