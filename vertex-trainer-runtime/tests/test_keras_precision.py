"""``vertex_trainer_runtime.keras.precision``: the policy ``auto`` picks per device, what a policy
computes in, and checkpoints that carry over between policies (run in a Keras project's env)."""

from __future__ import annotations

import pytest

pytest.importorskip("keras")
np = pytest.importorskip("numpy")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("tf_keras")

from vertex_trainer_runtime.keras import precision  # noqa: E402


@pytest.mark.parametrize(
    ("kind", "capability", "expected"),
    [
        ("cpu", None, "float32"),
        ("gpu", (9, 0), "mixed_bfloat16"),  # H100, H200
        ("gpu", (8, 9), "mixed_bfloat16"),  # L4
        ("gpu", (8, 0), "mixed_bfloat16"),  # A100
        ("gpu", (7, 5), "mixed_float16"),  # T4
        ("gpu", (7, 0), "mixed_float16"),  # V100
        ("gpu", (6, 0), "float32"),  # P100: no tensor cores
        ("gpu", (3, 7), "float32"),  # K80
        ("gpu", None, "float32"),  # capability unknown
    ],
)
def test_auto_precision_follows_the_compute_capability(kind, capability, expected):
    assert precision.choose(kind, capability) == expected


@pytest.fixture
def policy_reset():
    """The policy is process-wide: leave float32 behind for the next test."""
    yield
    keras.mixed_precision.set_global_policy("float32")


def tiny_classifier() -> keras.Model:
    """Two convolutions and a float32 softmax, as a trainer builds under a policy."""
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    x = keras.layers.Conv2D(8, 3, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(4, activation="softmax", dtype="float32")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    model.optimizer.build(model.trainable_variables)
    return model


def test_mixed_bfloat16_computes_in_bfloat16_on_float32_variables(policy_reset):
    assert precision.apply("mixed_bfloat16") == "mixed_bfloat16"
    classifier = tiny_classifier()
    images = np.random.default_rng(0).uniform(0, 255, (32, 16, 16, 3)).astype(np.float32)
    history = classifier.fit(images, np.arange(32) % 4, batch_size=16, epochs=1, verbose=0)

    assert int(classifier.optimizer.iterations.numpy()) == 2
    assert np.isfinite(history.history["loss"][-1])
    convolutions = [layer for layer in classifier.layers if isinstance(layer, keras.layers.Conv2D)]
    probe = keras.Model(classifier.input, [layer.output for layer in convolutions])
    assert [output.dtype for output in probe(images[:2])] == [tf.bfloat16] * 2
    assert classifier(images[:2]).dtype == tf.float32  # the float32 output layer
    assert {variable.dtype for variable in classifier.variables} == {tf.float32}


def test_a_mixed_float16_checkpoint_restores_under_float32(tmp_path, policy_reset):
    """The saved loss scale is left unread; weights and the optimizer's step come back."""
    precision.apply("mixed_float16")
    source = tiny_classifier()
    # tf-keras's compile adds loss scaling to mixed_float16 by itself.
    assert isinstance(source.optimizer, keras.mixed_precision.LossScaleOptimizer)
    assert source.optimizer.dynamic
    source.optimizer.iterations.assign(7)
    tf.train.Checkpoint(model=source, optimizer=source.optimizer).write(str(tmp_path / "ckpt"))

    precision.apply("float32")
    target = tiny_classifier()
    restored = tf.train.Checkpoint(model=target, optimizer=target.optimizer)
    restored.read(str(tmp_path / "ckpt")).assert_existing_objects_matched()
    assert int(target.optimizer.iterations.numpy()) == 7
    for saved, loaded in zip(source.get_weights(), target.get_weights(), strict=True):
        np.testing.assert_array_equal(saved, loaded)
