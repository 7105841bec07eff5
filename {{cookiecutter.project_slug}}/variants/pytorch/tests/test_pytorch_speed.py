"""Speed paths on CPU: throughput in the logs, padding for torch.compile, compiled = eager."""

from __future__ import annotations

import ast
import logging

import pytest
from conftest import base_args
from vertex_trainer_runtime.torch import batches

from trainer import task, train


@pytest.fixture
def fresh_dynamo():
    """torch.compile's caches and counters empty before, and emptied after (shared workers)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield counters
    torch._dynamo.reset()


def test_speed_is_logged_each_interval_and_time_spent_at_the_end(
    tiny_bert, csv_data, tmp_path, caplog
):
    caplog.set_level(logging.INFO)  # the trainer's and the runtime's loggers
    argv = [*base_args(tiny_bert, csv_data, tmp_path / "job"), "--max-steps=6"]
    argv += ["--logging-steps=2", "--save-steps=3", "--eval-steps=3"]

    assert task.main(argv) == 0

    speeds = [r for r in caplog.records if r.getMessage().startswith("Speed at step")]
    assert [r.getMessage().split(":")[0] for r in speeds] == [
        f"Speed at step {step}" for step in (1, 2, 4, 6)
    ]
    for record in speeds:
        text = record.getMessage()
        assert "examples/s" in text and "tokens/s" in text and "ms/step" in text
        assert "TFLOPS" not in text, "no model-FLOPs utilization without a GPU"
    spent = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Time spent")]
    assert len(spent) == 1
    assert "in 2 checkpoints" in spent[0] and "in 2 evaluations" in spent[0], spent


def _losses(output: str) -> list[float]:
    """The training losses the Trainer prints, one dict per logging step."""
    logs = [ast.literal_eval(line) for line in output.splitlines() if line.startswith("{'loss'")]
    return [float(entry["loss"]) for entry in logs]  # transformers 5 prints them as text


@pytest.mark.slow  # 40 s on 2 loaded cores: two runs and a trace of forward and backward
def test_compiled_training_gives_the_losses_of_eager_training(
    tiny_bert, csv_data, tmp_path, capsys, monkeypatch, fresh_dynamo
):
    """Three steps through the trainer with ``--torch-compile``, against eager ones.

    The compiled run traces forward and backward with AOTAutograd (the ``aot_eager`` backend):
    the whole compile path but inductor's code generation, which takes minutes on a loaded CPU;
    the GPU tier (test_pytorch_gpu.py) compiles with inductor.
    """
    counters = fresh_dynamo
    # The same padding in both runs: dropout draws its masks by shape.
    monkeypatch.setattr(batches, "padding_multiple", lambda *_: batches.COMPILED_PADDING_MULTIPLE)
    argv = [*base_args(tiny_bert, csv_data, tmp_path / "eager"), "--max-steps=3"]
    assert task.main(argv) == 0
    eager = _losses(capsys.readouterr().out)

    training_arguments = train.training_arguments

    def cheap_backend(parsed, output_dir):
        options = training_arguments(parsed, output_dir)
        assert options.torch_compile and options.torch_compile_mode == "default"
        options.torch_compile_backend = "aot_eager"
        return options

    monkeypatch.setattr(train, "training_arguments", cheap_backend)
    counters.clear()
    argv = [*base_args(tiny_bert, csv_data, tmp_path / "compiled"), "--max-steps=3"]
    assert task.main([*argv, "--torch-compile"]) == 0
    compiled = _losses(capsys.readouterr().out)

    assert counters["stats"]["unique_graphs"] >= 1, "nothing was compiled"
    assert len(eager) == 3 and len(compiled) == 3
    assert compiled == pytest.approx(eager, rel=1e-3)
    assert (tmp_path / "compiled" / "model" / "model.safetensors").is_file()
