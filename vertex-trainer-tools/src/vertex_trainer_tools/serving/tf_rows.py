"""A SavedModel's ``serving_default`` fed Vertex's instances JSON, as TF Serving's REST API does.

Vertex's prebuilt TensorFlow prediction image runs TF Serving and passes the request body to its
``:predict`` REST method, whose "row format" this module follows:

- one instance per row; the rows are stacked into one batch per input tensor;
- a signature with one input takes each instance as that input's value (or as ``{name: value}``);
  with several inputs each instance is an object with every input's name;
- ``{"b64": "..."}`` is binary data for a string input;
- the answer has one entry per instance: the value itself when the signature has one output,
  else an object of every output; string outputs come back as UTF-8 text, or as ``{"b64": ...}``
  when the output's name ends in ``_bytes``.

TensorFlow is imported inside ``predict()``: it is the project's, never the tools' dependency.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

from vertex_trainer_tools.errors import ToolError

SIGNATURE = "serving_default"


def columns(instances: list, names: list[str]) -> dict[str, list]:
    """Rows -> one list of values per input name (TF Serving's row format)."""
    result: dict[str, list] = {name: [] for name in names}
    for index, instance in enumerate(instances):
        if len(names) == 1 and not (isinstance(instance, dict) and set(instance) == set(names)):
            result[names[0]].append(decode(instance))
            continue
        if not isinstance(instance, dict) or set(instance) != set(names):
            got = sorted(instance) if isinstance(instance, dict) else type(instance).__name__
            raise ToolError(
                f"instances[{index}]: the signature takes the inputs {names}, got {got}"
            )
        for name in names:
            result[name].append(decode(instance[name]))
    return result


def decode(value: Any) -> Any:
    """``{"b64": "..."}`` -> bytes, anywhere in a value; everything else unchanged."""
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [decode(item) for item in value]
    return value


def encode(name: str, value: Any) -> Any:
    """A numpy value of output ``name`` -> JSON, with TF Serving's rule for strings."""
    if isinstance(value, bytes):
        if name.endswith("_bytes"):
            return {"b64": base64.b64encode(value).decode("ascii")}
        return value.decode("utf-8")
    if isinstance(value, list):
        return [encode(name, item) for item in value]
    return value


def rows(outputs: dict[str, Any]) -> list:
    """Output tensors (batch first) -> one prediction per instance."""
    values = {name: tensor.numpy().tolist() for name, tensor in outputs.items()}
    sizes = {len(batch) for batch in values.values()}
    if len(sizes) != 1:
        sizes_of = {name: len(batch) for name, batch in values.items()}
        raise ToolError(f"outputs of different batch sizes: {sizes_of}")
    if len(values) == 1:
        ((name, batch),) = values.items()
        return [encode(name, value) for value in batch]
    return [
        {name: encode(name, batch[index]) for name, batch in sorted(values.items())}
        for index in range(sizes.pop())
    ]


def predict(model_dir: str | Path, body: dict[str, Any]) -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's start-up banners: stdout stays JSON
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(str(model_dir))
    except Exception as error:  # noqa: BLE001 - TF raises many kinds for a damaged export
        message = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ToolError(
            f"{model_dir}: not a SavedModel TensorFlow can load ({message}); "
            "export it again (make train-local)"
        ) from None
    name = body.get("signature_name", SIGNATURE)
    if name not in loaded.signatures:
        known = sorted(loaded.signatures)
        raise ToolError(f"{model_dir}: no signature {name!r} (one of {known})")
    signature = loaded.signatures[name]
    specs = signature.structured_input_signature[1]
    feeds = {}
    for input_name, values in columns(body["instances"], sorted(specs)).items():
        try:
            feeds[input_name] = tf.constant(values, dtype=specs[input_name].dtype)
        except (ValueError, TypeError, OverflowError) as error:
            message = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ToolError(f"instances: input {input_name!r}: {message}") from None
    try:
        outputs = signature(**feeds)
    except (ValueError, TypeError, tf.errors.InvalidArgumentError) as error:
        message = str(error).strip().splitlines()[0]
        raise ToolError(f"instances: {name} refused them: {message}") from None
    return {"predictions": rows(outputs)}
