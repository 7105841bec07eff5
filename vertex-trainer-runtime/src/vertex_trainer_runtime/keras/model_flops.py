"""Model FLOPs of one example's training step, counted once before training, for the speed
lines' model TFLOPS and MFU and the job ledger's ``model_flops`` (``make report``).

Part of vertex-trainer-runtime (``vertex_trainer_runtime.keras``). The forward pass is counted by
TensorFlow's profiler on the model's graph for one example (every op it has a count for: matrix
products, convolutions, and the small element-wise rest), or, where it cannot be traced, over the
Dense and convolution layers. Training adds the backward pass of the trainable layers only: twice
their forward FLOPs (gradients for the weights and for the inputs), their share of the forward
pass taken from the layers' count. A frozen pretrained base costs its forward pass alone, as
TensorFlow computes no gradients through it. A model neither count can read has no figure
(None), never an error.
"""

from __future__ import annotations

import logging
import math

import tensorflow as tf

logger = logging.getLogger(__name__)

KERNELS = ("kernel", "depthwise_kernel", "pointwise_kernel")


def training_flops(model) -> float | None:
    """Forward and backward FLOPs of one example; None when they cannot be counted."""
    layers, frozen = layer_flops(model)
    forward = profiled_flops(model) or layers
    if not forward:
        return None
    trainable = 1.0 - frozen / layers if layers else 1.0  # the layers' share, for the whole pass
    return forward * (1.0 + 2.0 * trainable)


def profiled_flops(model) -> float | None:
    """The forward pass of one example, as TensorFlow's profiler counts it (inference mode)."""
    profiler = tf.compat.v1.profiler
    tf_logger = logging.getLogger("tensorflow")
    level = tf_logger.level
    tf_logger.setLevel(logging.ERROR)  # the v1 profiler's deprecation notice
    try:
        specs = [tf.TensorSpec([1, *spec.shape[1:]], spec.dtype) for spec in model.inputs]
        graph = tf.function(lambda *x: model(x[0] if len(x) == 1 else list(x), training=False))
        options = profiler.ProfileOptionBuilder(profiler.ProfileOptionBuilder.float_operation())
        concrete = graph.get_concrete_function(*specs)
        found = profiler.profile(graph=concrete.graph, options=options.with_empty_output().build())
        return float(found.total_float_ops) or None
    except Exception as error:  # noqa: BLE001 - any model the profiler cannot trace
        logger.debug("TensorFlow's profiler cannot count the model's FLOPs: %s", error)
        return None
    finally:
        tf_logger.setLevel(level)


def layer_flops(model) -> tuple[float, float]:
    """(all, frozen) forward FLOPs of one example in the Dense and convolution layers: 2 x the
    kernel's size x the output positions it slides over; layers without a known output shape
    are left out."""
    total = frozen = 0.0
    for layer in getattr(model, "submodules", ()):
        try:
            shape = layer.output_shape
        except (AttributeError, RuntimeError):
            continue  # not a layer, or one never called on a symbolic input
        if not isinstance(shape, tuple) or any(size is None for size in shape[1:]):
            continue
        if "Transpose" in type(layer).__name__:
            shape = layer.input_shape  # a transposed convolution slides over its input
        positions = math.prod(shape[1:-1])
        for name in KERNELS:
            kernel = getattr(layer, name, None)
            if kernel is not None and hasattr(kernel, "shape"):
                flops = 2.0 * math.prod(kernel.shape) * positions
                total += flops
                frozen += 0.0 if layer.trainable else flops
    return total, frozen
