"""What the Keras run takes from a trainer's data: a ``Source``, a labelled image set.

Part of vertex-trainer-runtime (``vertex_trainer_runtime.keras``). The trainer's ``make_data``
returns a training and an evaluation ``Source``; ``passes`` trains on one pass after pass in an
order fixed by the seed, ``eval_dataset`` evaluates each example of the other exactly once, and
``image_checks`` names a file that fails to decode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tensorflow as tf

# Keys (file names, indices) are small, so the shuffle buffer can be large; a source of decoded
# records (TFDS) passes a smaller one.
SHUFFLE_BUFFER = 100_000


@dataclass(frozen=True)
class Source:
    """A labelled image set: ``shard(context)`` yields cheap keys (file names, indices),
    ``load`` turns one into ``(image, label)`` after sharding and shuffling."""

    description: str
    class_names: tuple[str, ...]
    size: int
    shard: Callable[[tf.distribute.InputContext], tf.data.Dataset]
    load: Callable
    shuffle_buffer: int = SHUFFLE_BUFFER
    # The image files (an image folder's; none for synthetic and TFDS data) and the flag that
    # named them: image_checks.name_the_unreadable_image names a file that fails to decode.
    files: tuple[str, ...] = ()
    flag: str = "--train-data"

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


def run_here(action: Callable):
    """The ``chief_first`` of a single task: just run ``action``, return its result."""
    return action()


def eval_dataset(source: Source, batch: int) -> tf.data.Dataset:
    """Every eval example exactly once, in batches of ``batch``: one task evaluates the whole set,
    so the accuracy depends on neither the batch size nor the number of workers."""
    images = source.shard(tf.distribute.InputContext()).map(
        source.load, num_parallel_calls=tf.data.AUTOTUNE
    )
    return images.batch(batch).prefetch(tf.data.AUTOTUNE)
