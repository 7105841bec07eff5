"""Speed paths on CPU: padding for torch.compile, compiled = eager (the speed in the logs:
test_pytorch_train.py)."""

from __future__ import annotations

import pytest
from conftest import base_args, printed_losses
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
    eager = printed_losses(capsys.readouterr().out)

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
    compiled = printed_losses(capsys.readouterr().out)

    assert counters["stats"]["unique_graphs"] >= 1, "nothing was compiled"
    assert len(eager) == 3 and len(compiled) == 3
    assert compiled == pytest.approx(eager, rel=1e-3)
    assert (tmp_path / "compiled" / "model" / "model.safetensors").is_file()
