"""``vertex_trainer_runtime.keras.model_flops`` and the speed lines' FLOPs: a model's training
FLOPs per example are counted once (TensorFlow's profiler, the Dense and convolution layers
analytically), a frozen layer costs its forward pass alone, a model that cannot be counted has
no figure, and each interval's FLOPs of the global batch reach the job ledger."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("tf_keras")

from vertex_trainer_runtime import ledger  # noqa: E402
from vertex_trainer_runtime.keras import model_flops, throughput  # noqa: E402

# Dense 4 -> 3 -> 2: the matrix products' 2 x 4 x 3 and 2 x 3 x 2 FLOPs, and the biases' 3 + 2.
DENSE_PRODUCTS = 2 * 4 * 3 + 2 * 3 * 2
DENSE_FORWARD = DENSE_PRODUCTS + 3 + 2


def tiny_dense() -> keras.Model:
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(3, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2)(hidden))


def test_a_dense_model_counts_its_products_and_biases_and_trains_at_three_times_its_forward():
    model = tiny_dense()
    assert model_flops.layer_flops(model) == (DENSE_PRODUCTS, 0.0)
    assert model_flops.profiled_flops(model) == DENSE_FORWARD
    assert model_flops.training_flops(model) == 3 * DENSE_FORWARD


def test_a_frozen_layer_costs_its_forward_pass_alone():
    model = tiny_dense()
    model.layers[1].trainable = False  # as a frozen pretrained base
    assert model_flops.layer_flops(model) == (DENSE_PRODUCTS, 2 * 4 * 3)
    trainable = 1 - 2 * 4 * 3 / DENSE_PRODUCTS  # the second layer's share
    assert model_flops.training_flops(model) == pytest.approx(DENSE_FORWARD * (1 + 2 * trainable))


def test_convolutions_count_their_kernel_at_every_output_position():
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, padding="same")(inputs)  # 16 x 16 positions
    x = keras.layers.DepthwiseConv2D(3, strides=2, padding="same")(x)  # 8 x 8
    x = keras.layers.SeparableConv2D(4, 3, padding="same")(x)  # 8 x 8, depthwise + pointwise
    model = keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(x))
    expected = 2 * (3 * 3 * 3 * 8 * 256 + 3 * 3 * 8 * 64 + (3 * 3 * 8 + 8 * 4) * 64)
    assert model_flops.layer_flops(model) == (expected, 0.0)
    # The profiler also counts the biases and the pooling: a few per cent more.
    assert expected <= model_flops.profiled_flops(model) <= 1.05 * expected


def test_a_model_that_cannot_be_counted_has_no_figure():
    class Subclassed(keras.Model):  # no symbolic inputs: neither count can read it
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2)

        def call(self, inputs):
            return self.dense(inputs)

    model = Subclassed()
    model(tf.zeros([1, 4]))
    assert model_flops.training_flops(model) is None
    assert model_flops.training_flops(SimpleNamespace()) is None


class Records:
    """A job ledger that keeps its records."""

    step = 0

    def __init__(self):
        self.records = []

    def record(self, event, **fields):
        self.records.append({"event": event, **fields})

    def steps(self, first, last, seconds, paused=0.0):
        self.record("steps", first_step=first, last_step=last)


def test_each_interval_logs_model_tflops_and_records_the_global_batchs_flops(monkeypatch):
    records = Records()
    monkeypatch.setattr(ledger, "_current", records)
    clock = SimpleNamespace(now=0.0)
    timings = throughput.Timings(lambda: clock.now)
    speed = throughput.Throughput(global_batch=8, every_steps=2, timings=timings)
    model = tiny_dense()
    model.compile(optimizer="sgd", loss="mse")
    speed.set_model(model)
    speed.on_train_begin()
    speed.peak = 1e-9  # as on a GPU of 1 kFLOPS
    for _ in range(5):  # the first step, then two reports of two steps
        clock.now += 0.5
        speed.on_train_batch_end(0)

    per_step = 3 * DENSE_FORWARD * 8
    flops = [r for r in records.records if r["event"] == "model_flops"]
    assert [(r["flops"], r["steps"]) for r in flops] == [(per_step * n, n) for n in (1, 2, 2)]
    assert speed.reports[-1]["model_tflops"] == pytest.approx(per_step / 0.5 / 1e12)
    assert speed.reports[-1]["mfu"] == pytest.approx(per_step / 0.5 / 1e3)


def test_a_model_without_a_count_reports_speed_without_flops(monkeypatch):
    records = Records()
    monkeypatch.setattr(ledger, "_current", records)
    speed = throughput.Throughput(global_batch=8, every_steps=1, timings=throughput.Timings())
    speed.set_model(SimpleNamespace(optimizer=SimpleNamespace(iterations=tf.Variable(0))))
    speed.on_train_begin()
    for _ in range(3):
        speed.on_train_batch_end(0)
    assert speed.example_flops is None
    assert "model_tflops" not in speed.reports[-1]
    assert not [r for r in records.records if r["event"] == "model_flops"]
