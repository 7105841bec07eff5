"""vertex_trainer_runtime.torch.throughput and batches: speed figures, and padding that keeps
torch.compile from compiling again for each new batch length."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from vertex_trainer_runtime.torch import batches, throughput  # noqa: E402


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _tiny_bert():
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128,
    )  # fmt: skip
    return transformers.BertForSequenceClassification(config)


def _tokenizer(tmp_path):
    """A WordPiece tokenizer of 100 ids: the collator only pads with it."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(95)]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return transformers.BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt"))


def _example(length: int) -> dict[str, list[int]]:
    """A tokenized example of ``length`` tokens."""
    return {"input_ids": [5 + i % 50 for i in range(length)], "attention_mask": [1] * length}


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


def test_a_log_gets_tokens_model_flops_and_the_steps_time_without_the_pauses():
    clock = FakeClock()
    model = _tiny_bert()
    speed = throughput.Throughput(model, clock=clock)
    speed.peak = 100.0  # as on a GPU of 100 TFLOPS
    args, state = SimpleNamespace(world_size=2), SimpleNamespace(global_step=10)
    state.is_world_process_zero = True
    speed.on_train_begin(args, state, control=None)
    mask = torch.tensor([[1] * 64, [1] * 10 + [0] * 54])
    speed.count({"input_ids": torch.zeros(2, 64, dtype=torch.long), "attention_mask": mask})
    speed.count({"input_ids": torch.zeros(2, 64, dtype=torch.long)})  # no padding, no mask
    clock.now += 1.5
    with speed.timer.timing("checkpoint"):  # as MeasuredTrainer times a save
        clock.now += 4.0
    clock.now += 0.5
    state.global_step = 12
    rates = {"loss": 0.25}
    speed.on_log(args, state, control=None, logs=rates)
    assert rates["samples_per_second"] == 4.0  # 4 examples per process, 2 processes, 2 s
    assert rates["tokens_per_second"] == 2 * (74 + 128) / 2.0
    assert rates["padded_tokens_per_second"] == 2 * 256 / 2.0
    assert rates["step_seconds"] == 1.0
    embedding = sum(p.numel() for p in model.bert.embeddings.parameters())
    non_embedding = sum(p.numel() for p in model.parameters()) - embedding
    flops = 6 * non_embedding * 256 + 12 * 2 * 32 * 64 * 256
    assert rates["model_tflops"] == pytest.approx(flops / 2.0 / 1e12, abs=0.01)
    assert rates["mfu"] == pytest.approx(rates["model_tflops"] / 100.0, abs=1e-4)
    assert speed.summary() == {
        "checkpoint_seconds": 4.0,
        "checkpoints": 1,
        "evaluation_seconds": 0.0,
        "evaluations": 0,
        "training_seconds": 2.0,
        "samples_per_second": 4.0,
    }


def test_batches_are_padded_to_multiples_of_64_and_unpadded_ones_lose_the_mask(tmp_path):
    collate = batches.PaddingCollator(_tokenizer(tmp_path), pad_to_multiple_of=64)
    batch = collate([_example(5), _example(70)])
    assert batch["input_ids"].shape == (2, 128)
    assert batch["attention_mask"].sum() == 75
    batch = collate([_example(64), _example(64)])
    assert batch["input_ids"].shape == (2, 64) and "attention_mask" not in batch
    assert batches.padding_multiple(compiled=True, mixed_precision=True) == 64
    assert batches.padding_multiple(compiled=False, mixed_precision=True) == 8
    assert batches.padding_multiple(compiled=False, mixed_precision=False) is None


def test_new_batch_lengths_padded_to_64_compile_nothing_new(tmp_path):
    """Guards, not code generation, decide recompiles: the "eager" backend shows them cheaply."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    try:
        collate = batches.PaddingCollator(_tokenizer(tmp_path), pad_to_multiple_of=64)
        compiled = torch.compile(_tiny_bert().eval(), backend="eager")
        graphs = []
        for length in (3, 9, 17, 30, 45, 63):  # a new longest length in every batch, all < 64
            with torch.no_grad():
                compiled(**collate([_example(length), _example(2)]))
            graphs.append(counters["stats"]["unique_graphs"])
        assert graphs[0] >= 1
        assert graphs == [graphs[0]] * len(graphs), f"recompiled: {graphs}"
    finally:
        torch._dynamo.reset()
