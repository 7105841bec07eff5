"""A tiny TFDS image dataset, built offline: image ``i`` (4 x 6, not square) has every pixel equal
to ``i``, so tests can tell which examples a worker read. Each preparation appends the preparing
task's type (from TF_CONFIG) to the file named by $KERAS_TFDS_PREPARE_LOG, when set."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import tensorflow_datasets as tfds

COUNT = 40
PREPARE_LOG = "KERAS_TFDS_PREPARE_LOG"


class KerasTestNumbered(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Image(shape=(4, 6, 3)),
                    "label": tfds.features.ClassLabel(names=["even", "odd"]),
                }
            ),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        log = os.environ.get(PREPARE_LOG)
        if log:
            task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
            with open(log, "a") as handle:
                handle.write(f"{task.get('type', 'local')}\n")
            time.sleep(1)  # long enough for a second, concurrent preparation to start
        for i in range(COUNT):
            yield i, {"image": np.full((4, 6, 3), i, np.uint8), "label": i % 2}


NAME = KerasTestNumbered.name
