"""The entry point's contract: the trainer's declaration (``trainer/spec.py``) and bad input
stopped with one line before anything is trained (``python -m trainer.task``)."""

from __future__ import annotations

from vertex_trainer_runtime import spec

from trainer import task
from trainer.spec import SPEC

NO_MOUNT = "gs://no-such-bucket-mounted-here"


def test_every_variant_keeps_the_contract():
    from trainer import data, model, train  # noqa: F401 - the same module set

    assert spec.run_problems(SPEC) == []
    assert SPEC.description and SPEC.parser().description == SPEC.description
    for name in spec.FUNCTIONS:
        assert callable(SPEC.function(name)), name


def test_trainer_stops_with_one_error_line_before_training(tmp_path, capsys):
    """Checkpoints need a file path: gs:// without /gcs/ ends the run at once, exit 2."""
    argv = ["--train-data=synthetic", f"--model-dir={tmp_path}", f"--checkpoint-dir={NO_MOUNT}/c"]
    assert task.main(argv) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and "/gcs/no-such-bucket-mounted-here" in errors[0]
    assert not any(tmp_path.iterdir()), "nothing written to the model dir"
