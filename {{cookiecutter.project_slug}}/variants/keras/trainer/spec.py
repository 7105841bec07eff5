"""YOURS TO CHANGE: what this trainer is, for the runtime and the tools, in one declaration.

``trainer/task.py`` hands ``SPEC`` to the runtime, which parses its flags and calls its ``run``;
``make check``, ``make submit-hpt`` and ``local-run`` read it, without TensorFlow, to refuse a
flag, study or serving image the trainer would not use. So this module imports no framework: its
functions are ``"module:function"`` names, imported only when called.
"""

from __future__ import annotations

from vertex_trainer_runtime.spec import TrainerSpec

from trainer.flags import Flags

SPEC = TrainerSpec(
    flags=Flags,
    description="Train a Keras image classifier on Vertex AI or locally.",
    # vertex.yaml's hpt.metric, changed together; Keras logs it for the eval set as val_accuracy.
    metric="accuracy",
    goal="maximize",
    # MultiWorkerMirroredStrategy all-reduces with NCCL when a Reduction Server is there.
    no_reduction_server=None,
    export_file="saved_model.pb",  # the SavedModel's graph
    # The run in its fixed order is the runtime's; it calls this trainer's functions below.
    run="vertex_trainer_runtime.keras.run:run",
    make_data="trainer.train:make_data",
    make_model="trainer.train:make_model",
    evaluate="trainer.model:evaluator",
    export="trainer.train:export",
)
