"""``--precision``: the Keras mixed-precision policy of a run, ``auto`` chosen by the device.

Part of vertex-trainer-runtime (``vertex_trainer_runtime.keras``): the trainer passes its
``--precision`` to ``apply``. Variables stay float32 under every policy (checkpoints carry
over); the output layer is float32; ``mixed_float16`` gets tf-keras's loss scaling.
"""

from __future__ import annotations

import logging

import tensorflow as tf
import tf_keras as keras

logger = logging.getLogger(__name__)

AUTO = "auto"
FLOAT32 = "float32"
MIXED_BFLOAT16 = "mixed_bfloat16"
MIXED_FLOAT16 = "mixed_float16"
PRECISIONS = (AUTO, FLOAT32, MIXED_BFLOAT16, MIXED_FLOAT16)  # what ``apply`` takes
# NVIDIA compute capabilities: bfloat16 tensor cores from Ampere (8.0: A100, 8.6, 8.9: L4,
# 9.0: H100/H200); float16 tensor cores from Volta (7.0: V100, 7.5: T4). Older GPUs (P100 6.0,
# P4 6.1, K80 3.7) have no tensor cores: 16-bit compute saves them little.
NATIVE_BFLOAT16 = (8, 0)
FLOAT16_TENSOR_CORES = (7, 0)


def choose(device_kind: str, compute_capability: tuple[int, int] | None) -> str:
    """The policy ``auto`` means on a device: ``device_kind`` is "gpu" or "cpu"."""
    if device_kind != "gpu" or compute_capability is None:
        return FLOAT32
    if tuple(compute_capability) >= NATIVE_BFLOAT16:
        return MIXED_BFLOAT16
    if tuple(compute_capability) >= FLOAT16_TENSOR_CORES:
        return MIXED_FLOAT16
    return FLOAT32


def local_device() -> tuple[str, tuple[int, int] | None]:
    """("gpu", the lowest compute capability of this task's GPUs), or ("cpu", None)."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "cpu", None
    capabilities = [
        tf.config.experimental.get_device_details(gpu).get("compute_capability") for gpu in gpus
    ]
    if any(capability is None for capability in capabilities):
        return "gpu", None
    return "gpu", min(tuple(capability) for capability in capabilities)


def apply(requested: str) -> str:
    """Set the global policy for the models built from now on; returns its name.

    Always set, float32 included: the policy is process-wide and a previous run in the same
    process (tests) must not leave its own behind.
    """
    device_kind, capability = local_device()
    name = choose(device_kind, capability) if requested == AUTO else requested
    keras.mixed_precision.set_global_policy(name)
    if capability is not None:
        device = f"GPU compute capability {capability[0]}.{capability[1]}"
    else:
        device = device_kind.upper()
    logger.info("Precision %s (--precision=%s, %s)", name, requested, device)
    if device_kind == "cpu" and name != FLOAT32:
        logger.info("Most CPUs compute 16-bit floats no faster than float32")
    return name
