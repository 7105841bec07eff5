"""Speed paths on CPU: throughput in the logs, padding for torch.compile, compiled = eager."""

from __future__ import annotations

import ast
import logging

import pytest
import torch
from conftest import base_args

from trainer import batches, task, throughput, train
from trainer import model as models


@pytest.fixture
def fresh_dynamo():
    """torch.compile's caches and counters empty before, and emptied after (shared workers)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield counters
    torch._dynamo.reset()


def _example(length: int) -> dict[str, list[int]]:
    """A tokenized example of ``length`` tokens (ids of the tiny vocabulary)."""
    return {
        "input_ids": [5 + index % 50 for index in range(length)],
        "attention_mask": [1] * length,
    }


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA A100-SXM4-40GB", 312.0),
        ("NVIDIA L4", 121.0),
        ("Tesla T4", 65.0),
        ("Tesla V100-SXM2-16GB", 125.0),
        ("NVIDIA L40S", None),  # not an L4
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_peak_by_gpu_name(name, peak):
    assert throughput.peak_tflops(name) == peak


def test_batches_are_padded_to_multiples_of_64_and_unpadded_ones_lose_the_mask(tiny_bert):
    tokenizer = models.load_tokenizer(tiny_bert)
    collate = batches.PaddingCollator(tokenizer, pad_to_multiple_of=64)
    batch = collate([_example(5), _example(70)])
    assert batch["input_ids"].shape == (2, 128)
    assert batch["attention_mask"].sum() == 75
    batch = collate([_example(64), _example(64)])
    assert batch["input_ids"].shape == (2, 64) and "attention_mask" not in batch
    assert batches.padding_multiple(compiled=True, mixed_precision=True) == 64
    assert batches.padding_multiple(compiled=False, mixed_precision=True) == 8
    assert batches.padding_multiple(compiled=False, mixed_precision=False) is None


@pytest.mark.slow  # 13-45 s on 2 loaded cores: tracing the tiny BERT
def test_new_batch_lengths_padded_to_64_compile_nothing_new(tiny_bert, fresh_dynamo):
    """Guards, not code generation, decide recompiles: the "eager" backend shows them cheaply."""
    counters = fresh_dynamo
    tokenizer = models.load_tokenizer(tiny_bert)
    model = models.load_model(tiny_bert, ["negative", "positive"]).eval()
    collate = batches.PaddingCollator(tokenizer, pad_to_multiple_of=64)
    compiled = torch.compile(model, backend="eager")
    graphs = []
    for length in (3, 9, 17, 30, 45, 63):  # a new longest length in every batch, all under 64
        features = [_example(length), _example(2)]
        with torch.no_grad():
            compiled(**collate(features))
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[0] >= 1
    assert graphs == [graphs[0]] * len(graphs), f"recompiled: {graphs}"


def test_speed_is_logged_each_interval_and_time_spent_at_the_end(
    tiny_bert, csv_data, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="trainer")
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


def test_rates_count_non_pad_tokens_and_model_flops():
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128,
    )  # fmt: skip
    model = BertForSequenceClassification(config)
    speed = throughput.Throughput(model)
    speed.peak = 100.0  # as on a GPU of 100 TFLOPS
    mask = torch.tensor([[1] * 64, [1] * 10 + [0] * 54])
    speed.count({"input_ids": torch.zeros(2, 64, dtype=torch.long), "attention_mask": mask})
    speed.count({"input_ids": torch.zeros(2, 64, dtype=torch.long)})  # no padding, no mask
    rates = speed.rates(seconds=2.0, steps=2, world_size=2)
    assert rates["samples_per_second"] == 4.0  # 4 examples per process, 2 processes, 2 s
    assert rates["tokens_per_second"] == 2 * (74 + 128) / 2.0
    assert rates["padded_tokens_per_second"] == 2 * 256 / 2.0
    assert rates["step_seconds"] == 1.0
    embedding = sum(p.numel() for p in model.bert.embeddings.parameters())
    non_embedding = sum(p.numel() for p in model.parameters()) - embedding
    flops = 6 * non_embedding * 256 + 12 * 2 * 32 * 64 * 256
    assert rates["model_tflops"] == pytest.approx(flops / 2.0 / 1e12, abs=0.01)
    assert rates["mfu"] == pytest.approx(rates["model_tflops"] / 100.0, abs=1e-4)


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
