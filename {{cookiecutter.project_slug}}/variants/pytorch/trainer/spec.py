"""YOURS TO CHANGE: what this trainer is, for the runtime and the tools, in one declaration.

``trainer/task.py`` hands ``SPEC`` to the runtime, which parses its flags and calls its ``run``;
``make check``, ``make submit-hpt`` and ``local-run`` read it, without torch or transformers, to
refuse a flag, study or serving image the trainer would not use. So this module imports no
framework: its functions are ``"module:function"`` names, imported only when called.
"""

from __future__ import annotations

from vertex_trainer_runtime.spec import TrainerSpec

from trainer.flags import Flags

SPEC = TrainerSpec(
    flags=Flags,
    description=(
        "Fine-tune a BERT-family model (Hugging Face transformers) for text classification; "
        "IMDB sentiment by default."
    ),
    # vertex.yaml's hpt.metric, changed together: the eval accuracy of the exported model.
    metric="accuracy",
    goal="maximize",
    # DDP all-reduces gradients with NCCL on GPUs; the reducers are not ranks (distributed.py).
    no_reduction_server=None,
    export_file="config.json",  # save_pretrained's folder
    # The run in its fixed order is the runtime's; it calls the functions named below.
    run="vertex_trainer_runtime.torch.run:run",
    make_data="trainer.data:make_data",
    make_model="trainer.model:make_model",
    evaluate="trainer.train:compute_metrics",
    export="trainer.model:export",
    training_arguments="trainer.train:training_arguments",
    tokenize="trainer.data:tokenize_for",
    worker_flags="trainer.model:worker_flags",
)
