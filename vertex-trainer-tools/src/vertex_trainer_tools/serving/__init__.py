"""Answer a Vertex prediction request with an exported model, the way its serving container does.

``{"instances": [...]}`` in, ``{"predictions": [...]}`` out, offline, for the three exports:

- ``saved_model.pb`` (Keras): the ``serving_default`` signature fed TF Serving's row format, in
  this Python (TensorFlow is the project's); ``tf_rows.py``.
- ``model.bst`` (XGBoost): loaded by the xgboost of Vertex's prebuilt ``xgboost-cpu.2-1``
  prediction image, in a cached virtual environment of its own; ``xgboost_predictor.py``.
- ``config.json`` + tokenizer (PyTorch, ``save_pretrained``): ``hf-serve``, the serving library of
  Google's Hugging Face PyTorch inference container, started as that container starts it and
  asked over HTTP; ``hf.py``.

``vertex-tools predict-local`` (``make predict-local``) and the pytest fixture ``serve_model``
both call ``predict()``, so users and tests run the same path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vertex_trainer_tools.errors import ToolError

DEFAULT_MODEL_DIR = "outputs/local/latest/model"  # the newest `make train-local` job's export
# Artifact name -> the framework whose serving container loads it (Vertex's names, EXP doc).
ARTIFACTS = {
    "saved_model.pb": "tensorflow",
    "model.bst": "xgboost",
    "config.json": "huggingface",
}


def framework_of(model_dir: str | Path) -> str:
    """The framework of the export in ``model_dir``, by the artifact its container loads."""
    folder = Path(model_dir)
    if not folder.is_dir():
        raise ToolError(f"{folder}: no such model dir (e.g. outputs/local/latest/model)")
    for name, framework in ARTIFACTS.items():
        if (folder / name).is_file():
            return framework
    names = ", ".join(ARTIFACTS)
    raise ToolError(f"{folder}: no {names} (an exported model dir of the trainer)")


def read_request(path: str | Path) -> dict[str, Any]:
    """The request body of a JSON file: ``{"instances": [...]}`` (plus ``parameters``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ToolError(f"{path}: {error.strerror or error} (e.g. instances.json)") from None
    except UnicodeDecodeError as error:
        raise ToolError(
            f"{path}: not UTF-8 text (byte 0x{text_byte(error)} at offset {error.start}): "
            "save the request as UTF-8 JSON"
        ) from None
    try:
        body = json.loads(text)
    except ValueError as error:
        raise ToolError(f"{path}: not JSON: {error}") from None
    check_request(body, str(path))
    return body


def text_byte(error: UnicodeDecodeError) -> str:
    return error.object[error.start : error.start + 1].hex()


def check_request(body: Any, where: str = "request") -> None:
    """Vertex's rule: a JSON object whose ``instances`` is a non-empty list."""
    example = '(e.g. {"instances": [[1.0, 2.0]]})'
    if not isinstance(body, dict):
        raise ToolError(f"{where}: not a JSON object {example}")
    instances = body.get("instances")
    if not isinstance(instances, list) or not instances:
        why = "missing" if instances is None else "not a non-empty list"
        raise ToolError(f"{where}: instances: {why} {example}")
    if not isinstance(body.get("parameters", {}), dict):
        raise ToolError(f'{where}: parameters: not an object (e.g. {{"top_k": 2}})')


def predict(model_dir: str | Path, body: dict[str, Any]) -> dict[str, Any]:
    """``{"predictions": [...]}`` for ``body``, from the serving path of ``model_dir``'s export."""
    check_request(body)
    framework = framework_of(model_dir)
    if framework == "tensorflow":
        from vertex_trainer_tools.serving import tf_rows

        return tf_rows.predict(model_dir, body)
    if framework == "xgboost":
        from vertex_trainer_tools.serving import envs

        return envs.xgboost_predict(model_dir, body)
    from vertex_trainer_tools.serving import hf

    return hf.predict(model_dir, body)
