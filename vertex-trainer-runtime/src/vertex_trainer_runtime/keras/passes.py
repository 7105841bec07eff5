"""Training in passes: every example once per pass, whatever the batch size and the number of
workers, in an order fixed by ``--seed`` and the pass, so a restart trains the same batches.

Part of vertex-trainer-runtime (``vertex_trainer_runtime.keras``). A ``source`` is the trainer's
labelled image set: ``size``, ``shuffle_buffer``, ``shard(context)`` (a dataset of cheap keys,
this worker's shard) and ``load(*key)`` (one ``(image, label)``).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from vertex_trainer_runtime import cli


def steps_per_pass(size: int, global_batch: int, replicas: int) -> int:
    """The steps of one pass over ``size`` examples: full global batches, the last step the
    rest; when fewer are left than replicas (an empty per-replica batch breaks TensorFlow's CPU
    kernels), those go into the step before."""
    if size < replicas:
        raise cli.InputError(
            f"{size} training examples are fewer than the {replicas} replicas: every replica "
            "needs at least one example per step"
        )
    steps = -(-size // global_batch)  # ceil
    left_for_last = size - (steps - 1) * global_batch
    if steps > 1 and left_for_last < replicas:
        steps -= 1
    return steps


def pass_batch_sizes(size: int, global_batch: int, context: tf.distribute.InputContext):
    """The sizes of this pipeline's per-replica batches in one pass: full ones, then its last
    examples split evenly over its replicas (its shard as ``Dataset.shard`` and
    ``tfds.even_splits`` cut it)."""
    pipelines, index = context.num_input_pipelines, context.input_pipeline_id
    replicas = context.num_replicas_in_sync
    local = replicas // pipelines
    per_replica = global_batch // replicas
    shard_size = size // pipelines + (1 if index < size % pipelines else 0)
    full = (steps_per_pass(size, global_batch, replicas) - 1) * local
    left = shard_size - full * per_replica
    last = [left // local + (1 if j < left % local else 0) for j in range(local)]
    return [per_replica] * full + last


def _batch_by_sizes(examples: tf.data.Dataset, sizes: list[int]) -> tf.data.Dataset:
    """``examples`` in consecutive batches of the given sizes (in one pass over them)."""
    sizes_tensor = tf.constant(sizes, tf.int64)
    ends = tf.constant(np.cumsum(sizes), tf.int64)

    def batch_of(position, example):
        return tf.searchsorted(ends, tf.reshape(position, [1]), side="right", out_type=tf.int64)[0]

    def batch(key, window):
        return window.map(lambda position, example: example).batch(sizes_tensor[key])

    return examples.enumerate().group_by_window(
        batch_of, batch, window_size_func=lambda key: sizes_tensor[key]
    )


def _pass_seed(seed: int, pass_number, pipeline: int):
    """The shuffle seed of one pass of one pipeline: a function of these three only."""
    pass_number = tf.cast(pass_number, tf.int64)
    return (tf.constant(seed, tf.int64) * 1_000_003 + pass_number) * 1_009 + pipeline


def training_dataset(
    source,
    context: tf.distribute.InputContext,
    global_batch: int,
    seed: int,
    start_step: int = 0,
) -> tf.data.Dataset:
    """This worker's per-replica batches from global step ``start_step`` on: pass after pass,
    each shuffled by ``seed``, the pass and the worker, so step ``t`` (step ``t % steps`` of pass
    ``t // steps``) gets the same batches in every attempt."""
    sizes = pass_batch_sizes(source.size, global_batch, context)
    local = context.num_replicas_in_sync // context.num_input_pipelines
    steps = steps_per_pass(source.size, global_batch, context.num_replicas_in_sync)
    first_pass, skipped_steps = divmod(start_step, steps)
    shard_size = sum(sizes)
    buffer = min(shard_size, source.shuffle_buffer)

    def one_pass(pass_number, skipped_batches: int = 0) -> tf.data.Dataset:
        keys = source.shard(context).shuffle(
            buffer, seed=_pass_seed(seed, pass_number, context.input_pipeline_id)
        )
        # Skip the keys of the steps already trained before loading any images: only the last
        # step of a pass differs from full batches, and it is never skipped.
        keys = keys.skip(sum(sizes[:skipped_batches]))
        images = keys.map(source.load, num_parallel_calls=tf.data.AUTOTUNE)
        return _batch_by_sizes(images, sizes[skipped_batches:])

    first = one_pass(first_pass, skipped_steps * local)
    following = tf.data.Dataset.counter(first_pass + 1).flat_map(one_pass)
    return first.concatenate(following).prefetch(tf.data.AUTOTUNE)


def worker_batches(
    source, workers: int, per_replica: int, start_step: int, steps: int, seed: int = 0
) -> list[list[list]]:
    """Per step from ``start_step``, each worker's batch as the first items of its examples (a
    numbered source's indices), one replica per worker: what such a job trains on, in order.
    For checking a source's passes and restarts (the runtime's and the trainer's tests)."""
    per_worker = []
    for worker in range(workers):
        context = tf.distribute.InputContext(workers, worker, workers)
        dataset = training_dataset(source, context, per_replica * workers, seed, start_step)
        per_worker.append([first.numpy().tolist() for first, _ in dataset.take(steps)])
    return [list(step) for step in zip(*per_worker, strict=True)]
