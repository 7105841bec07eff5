"""Training speed in the logs and TensorBoard: examples/s,
tokens/s, step time and, on a GPU, model-FLOPs use; at the end the time in checkpoints and
evaluations. Shapes are counted on the host; nothing waits for the GPU at every step, and the
clock (``vertex_trainer_runtime.speed``) is read at each log and around each pause, never per step.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import torch
from transformers import TrainerCallback

from vertex_trainer_runtime import ledger, speed

# The GPUs' peak, shared with the other frameworks (speed), still importable from here.
from vertex_trainer_runtime.speed import H100_PCIE_TFLOPS, PEAK_TFLOPS, peak_tflops  # noqa: F401
from vertex_trainer_runtime.torch import training_order

logger = logging.getLogger(__name__)


class FlopsModel:
    """Model FLOPs of a training step, as PaLM's MFU (its appendix B) counts them: per token
    6 x non-embedding parameters + 12 x layers x hidden size x sequence length (the attention
    scores), for every token the model computes, padding included."""

    def __init__(self, model):
        config = model.config
        embedding = sum(
            parameter.numel()
            for name, parameter in model.named_parameters()
            if ".embeddings." in f".{name}"
        )
        total = sum(parameter.numel() for parameter in model.parameters())
        self.non_embedding = total - embedding
        self.attention = 12 * config.num_hidden_layers * config.hidden_size

    def flops(self, padded_tokens: int, squared_lengths: int) -> float:
        """``squared_lengths``: the sum over examples of the padded length squared."""
        return 6.0 * self.non_embedding * padded_tokens + self.attention * squared_lengths


class Throughput(TrainerCallback):
    """Counts each training batch (``count``, from :class:`MeasuredTrainer`) and the pauses for
    checkpoints and evaluations, and adds the speed to each training log (rank 0's counts x the
    number of processes)."""

    def __init__(
        self,
        model,
        device: torch.device | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.flops_model = FlopsModel(model)
        cuda = device is not None and device.type == "cuda"
        self.peak = peak_tflops(torch.cuda.get_device_name(device)) if cuda else None
        self.timer = speed.IntervalTimer(clock)  # pauses: "checkpoint", "evaluation"
        self._reset()
        self.train_seconds = 0.0
        self.samples_per_second: float | None = None
        self._ledger = ledger.current()

    def _reset(self) -> None:
        self.examples = 0
        self.padded_tokens = 0
        self.squared_lengths = 0
        self.real_tokens: torch.Tensor | int = 0  # on the batches' device

    def count(self, inputs) -> None:
        input_ids = inputs.get("input_ids") if hasattr(inputs, "get") else None
        if input_ids is None or input_ids.dim() != 2:
            return
        batch, length = input_ids.shape
        self.examples += batch
        self.padded_tokens += batch * length
        self.squared_lengths += batch * length * length
        mask = inputs.get("attention_mask")
        # A tensor sum is queued on the device, not waited for; no mask: no padding.
        self.real_tokens = self.real_tokens + (mask.sum() if mask is not None else batch * length)

    def on_train_begin(self, args, state, control, **kwargs):
        self.timer.start(state.global_step)
        self._ledger = ledger.current()
        self._reset()
        return control

    def on_step_end(self, args, state, control, **kwargs):
        self._ledger.step = state.global_step  # the job ledger's progress: no clock, no I/O
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or "loss" not in logs or self.timer.mark is None:
            return control
        interval = self.timer.lap(state.global_step).without_pauses()
        if interval.steps > 0 and self.examples:  # this node's processes, as rank 0 counted
            flops = self.flops_model.flops(self.padded_tokens, self.squared_lengths)
            node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
            self._ledger.record("model_flops", flops=flops * node, steps=interval.steps)
        if interval.seconds > 0 and interval.steps > 0 and self.examples:
            logs.update(self.rates(interval.seconds, interval.steps, args.world_size))
            self.train_seconds += interval.seconds
            if state.is_world_process_zero:
                logger.info("Speed at step %d: %s", state.global_step, _described(logs))
        self._reset()
        return control

    def rates(self, seconds: float, steps: int, world_size: int = 1) -> dict[str, float]:
        real = self.real_tokens
        real = int(real.item()) if isinstance(real, torch.Tensor) else int(real)
        rates = {
            "samples_per_second": round(world_size * self.examples / seconds, 3),
            "tokens_per_second": round(world_size * real / seconds, 1),
            "padded_tokens_per_second": round(world_size * self.padded_tokens / seconds, 1),
            "step_seconds": round(seconds / steps, 5),
        }
        self.samples_per_second = rates["samples_per_second"]
        if self.peak:
            flops = self.flops_model.flops(self.padded_tokens, self.squared_lengths)
            rates["model_tflops"] = round(flops / seconds / 1e12, 2)  # per GPU
            rates["mfu"] = round(rates["model_tflops"] / self.peak, 4)
        return rates

    def summary(self) -> dict[str, float]:
        """Time in checkpoints and evaluations (this attempt), and the last speed measured."""
        seconds, counts = self.timer.seconds, self.timer.counts
        result = {
            "checkpoint_seconds": round(seconds["checkpoint"], 2),
            "checkpoints": counts["checkpoint"],
            "evaluation_seconds": round(seconds["evaluation"], 2),
            "evaluations": counts["evaluation"],
            "training_seconds": round(self.train_seconds, 2),
        }
        if self.samples_per_second is not None:
            result["samples_per_second"] = self.samples_per_second
        return result


def _described(logs: dict) -> str:
    text = (
        f"{logs['samples_per_second']:.1f} examples/s, {logs['tokens_per_second']:.0f} tokens/s "
        f"({logs['padded_tokens_per_second']:.0f} with padding), "
        f"{1000 * logs['step_seconds']:.1f} ms/step"
    )
    if "mfu" in logs:
        text += f", {logs['model_tflops']:.1f} model TFLOPS = {100 * logs['mfu']:.1f} % of peak"
    return text


class MeasuredTrainer(training_order.SeededOrderTrainer):
    """The trainer that feeds :class:`Throughput`: each batch's shape, each pause's time."""

    def __init__(self, *args, throughput: Throughput, **kwargs):
        super().__init__(*args, **kwargs)
        self.throughput = throughput

    def training_step(self, model, inputs, *args, **kwargs):
        self.throughput.count(inputs)
        return super().training_step(model, inputs, *args, **kwargs)

    def evaluate(self, *args, **kwargs):
        with self.throughput.timer.timing("evaluation"):
            return super().evaluate(*args, **kwargs)

    def _save_checkpoint(self, *args, **kwargs):
        with self.throughput.timer.timing("checkpoint"):
            return super()._save_checkpoint(*args, **kwargs)
