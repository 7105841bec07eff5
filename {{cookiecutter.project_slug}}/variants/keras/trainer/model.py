"""The classifier (transfer learning on a Keras application), its evaluation and its export.

YOURS TO CHANGE: the network, the optimizer, the SavedModel's signatures. tf-keras
(Keras 2) on purpose: Keras 3's ``fit`` fails under MultiWorkerMirroredStrategy (keras#20585).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import tensorflow as tf
import tf_keras as keras
from vertex_trainer_runtime import cli

from trainer import data, flags
from trainer.spec import SPEC

logger = logging.getLogger(__name__)

# name -> (constructor, preprocess_input); every model takes float pixels in 0..255.
APPLICATIONS = {
    "resnet50": (keras.applications.ResNet50, keras.applications.resnet50.preprocess_input),
    "mobilenet_v2": (
        keras.applications.MobileNetV2,
        keras.applications.mobilenet_v2.preprocess_input,
    ),
    "efficientnet_b0": (
        keras.applications.EfficientNetB0,
        keras.applications.efficientnet.preprocess_input,
    ),
}
SMALL_CNN = "small-cnn"
MODELS = (*APPLICATIONS, SMALL_CNN)
assert MODELS == flags.MODELS, "trainer/flags.py offers the models built here"
MIN_APPLICATION_SIZE = 32


def _small_cnn(inputs: keras.layers.Layer) -> keras.layers.Layer:
    """A few thousand parameters: for synthetic data, tests and smoke runs."""
    x = keras.layers.Rescaling(1.0 / 255)(inputs)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    return keras.layers.GlobalAveragePooling2D()(x)


def build(
    config: flags.Model,
    num_classes: int,
    image_size: int,
    learning_rate: float,
    jit_compile: bool = False,
) -> keras.Model:
    """A compiled classifier; build it in the strategy's scope after ``precision.apply``.
    ImageNet weights stay frozen unless ``--fine-tune``; the output layer is float32 whatever
    the policy (a float16 softmax is not stable), so the export serves float32 probabilities.
    """
    name = config.model
    inputs = keras.Input(shape=(image_size, image_size, 3), name="images")
    # --- yours to change --- (the network between the served inputs and the float32 output)
    features = _small_cnn(inputs) if name == SMALL_CNN else _pretrained(config, inputs, image_size)
    # --- end ---
    outputs = keras.layers.Dense(
        num_classes, activation="softmax", dtype="float32", name="probabilities"
    )(features)
    model = keras.Model(inputs, outputs, name=name.replace("-", "_"))
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )
    if jit_compile:
        logger.info("XLA: the training step is compiled (--jit-compile)")
    # Create the optimizer's slots now, so a checkpoint restores them before training starts.
    model.optimizer.build(model.trainable_variables)
    return model


def _pretrained(config: flags.Model, inputs, image_size: int):
    """The Keras application's pooled features, its ImageNet weights frozen unless fine-tuned."""
    name = config.model
    constructor, preprocess = APPLICATIONS[name]
    pretrained = config.weights == "imagenet"
    try:
        base = constructor(
            include_top=False,
            weights="imagenet" if pretrained else None,
            input_shape=(image_size, image_size, 3),
            pooling="avg",
        )
    except Exception as error:  # noqa: BLE001 - tf-keras raises a bare Exception here
        if "URL fetch failure" not in str(error):
            raise
        raise cli.InputError(
            f"--weights imagenet: cannot download the {name} weights ({error}); "
            "use --weights=none offline"
        ) from None
    base.trainable = config.fine_tune or not pretrained
    features = base(preprocess(inputs), training=None if base.trainable else False)
    return keras.layers.Dropout(0.2)(features)


def evaluator(model: keras.Model) -> Callable[[tf.data.Dataset], dict[str, float]]:
    """``evaluate(dataset, stop)``: mean loss and accuracy over a finite dataset on this task
    alone, summed in Python (reading Keras metric variables is a collective under MWMS)."""

    @tf.function(reduce_retracing=True)
    def sums(images, labels):
        probabilities = model(images, training=False)
        losses = keras.losses.sparse_categorical_crossentropy(labels, probabilities)
        predicted = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        correct = tf.reduce_sum(tf.cast(tf.equal(predicted, labels), tf.int64))
        return tf.reduce_sum(tf.cast(losses, tf.float64)), correct, tf.size(labels, tf.int64)

    def evaluate(
        dataset: tf.data.Dataset, stop: Callable[[], bool] | None = None
    ) -> dict[str, float] | None:
        """None when ``stop()`` turned true between two batches (a preemption notice)."""
        loss, correct, count = 0.0, 0, 0
        for images, labels in dataset:
            if stop is not None and stop():
                return None
            batch_loss, batch_correct, batch_count = sums(images, labels)
            loss += float(batch_loss)
            correct += int(batch_correct)
            count += int(batch_count)
        count = max(count, 1)  # the run refuses an empty eval set
        return {"loss": loss / count, SPEC.metric: correct / count}

    return evaluate


def export(model: keras.Model, class_names: tuple[str, ...], image_size: int, path: str) -> None:
    """A SavedModel for TF Serving: ``serving_default`` takes float32 ``images`` (0..255),
    ``serving_bytes`` encoded ``image_bytes`` (``{"b64": ...}``); both return ``probabilities``,
    ``class_index`` and ``class_name``."""
    names = tf.constant(list(class_names))
    images_spec = tf.TensorSpec([None, image_size, image_size, 3], tf.float32, name="images")
    image_spec = tf.TensorSpec([image_size, image_size, 3], tf.float32)

    @tf.function(input_signature=[images_spec])
    def serve(images):
        probabilities = model(images, training=False)
        index = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return {
            "probabilities": probabilities,
            "class_index": index,
            "class_name": tf.gather(names, index),
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
    def serve_bytes(image_bytes):
        images = tf.map_fn(
            lambda raw: data.decode_image(raw, image_size),
            image_bytes,
            fn_output_signature=image_spec,
        )
        return serve(images)

    module = tf.Module()
    module.model = model
    module.serve = serve
    module.serve_bytes = serve_bytes
    tf.saved_model.save(
        module, path, signatures={"serving_default": serve, "serving_bytes": serve_bytes}
    )
