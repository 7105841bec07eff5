"""``vertex_trainer_runtime.keras.passes``: a pass over the data trains on every example once,
whatever the size, batch and worker count, and a stream started mid-pass (a restart) continues
the same order. The source is numbered: each example is its own index."""

from __future__ import annotations

import collections
from types import SimpleNamespace

import pytest

pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from vertex_trainer_runtime.keras import passes  # noqa: E402


def numbered(size: int) -> SimpleNamespace:
    """A source of ``size`` examples, each its index (labels: index % 4), read by shard."""

    def shard(context: tf.distribute.InputContext) -> tf.data.Dataset:
        keys = tf.data.Dataset.range(size)
        keys = keys.shard(context.num_input_pipelines, context.input_pipeline_id)
        return keys.map(lambda i: (i, tf.cast(i % 4, tf.int32)))

    return SimpleNamespace(
        size=size, shuffle_buffer=100_000, shard=shard, load=lambda index, label: (index, label)
    )


stream = passes.worker_batches  # per step, the indices each worker's replica trains on


@pytest.mark.parametrize(
    "size,per_replica,workers",
    [(501, 8, 2), (501, 32, 1), (65, 32, 2), (100, 7, 3), (64, 16, 2)],
)
def test_each_pass_trains_on_every_example_once(size, per_replica, workers):
    """Every example once per pass, no empty batch, full global batches but in the last step,
    which takes the rest; a new order each pass."""
    source = numbered(size)
    steps = passes.steps_per_pass(size, per_replica * workers, workers)
    whole = stream(source, workers, per_replica, 0, 3 * steps)
    for number in range(3):
        one_pass = whole[number * steps : (number + 1) * steps]
        seen = collections.Counter(i for step in one_pass for batch in step for i in batch)
        assert sorted(seen) == list(range(size)) and set(seen.values()) == {1}
        sizes = [sum(len(batch) for batch in step) for step in one_pass]
        assert sizes[:-1] == [per_replica * workers] * (steps - 1)
        assert all(batch for step in one_pass for batch in step)
    firsts = [whole[n * steps][0] for n in range(3)]
    assert firsts[0] != firsts[1] != firsts[2]


def test_the_last_step_takes_the_rest_as_keras_does():
    # 501 examples, global batch 16: 31 full steps and one of 5 (3 + 2 on two replicas).
    assert passes.steps_per_pass(501, 16, 2) == 32
    sizes = [passes.pass_batch_sizes(501, 16, tf.distribute.InputContext(2, w, 2)) for w in (0, 1)]
    assert [s[-1] for s in sizes] == [3, 2] and all(s[:-1] == [8] * 31 for s in sizes)
    # 65 examples, global batch 64 on two replicas: one left, too few for both replicas, so it
    # joins the step before, whose per-replica batches are 33 and 32.
    assert passes.steps_per_pass(65, 64, 2) == 1
    sizes = [passes.pass_batch_sizes(65, 64, tf.distribute.InputContext(2, w, 2)) for w in (0, 1)]
    assert sizes == [[33], [32]]


def test_fewer_examples_than_replicas_is_an_input_error():
    from vertex_trainer_runtime import cli

    with pytest.raises(cli.InputError, match="3 training examples are fewer than the 4 replicas"):
        passes.steps_per_pass(3, 8, 4)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_stream_started_mid_pass_continues_the_same_order(workers):
    """What a restart at step t trains on is what the uninterrupted run trained from step t."""
    source = numbered(101)
    steps = passes.steps_per_pass(101, 8 * workers, workers)
    whole = stream(source, workers, 8, 0, 3 * steps)
    for start_step in (steps // 2, steps, steps + 3):
        assert stream(source, workers, 8, start_step, steps) == whole[start_step:][:steps]
