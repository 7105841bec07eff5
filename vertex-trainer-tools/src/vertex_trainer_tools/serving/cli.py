"""``vertex-tools predict-local --instances FILE [--model-dir DIR]``: a Vertex prediction request
answered here by the exported model, through the serving path of its prebuilt container.

Prints the response, ``{"predictions": [...]}``. A missing or malformed request file, or a model
dir without the artifact a container loads, is one ``ERROR:`` line and exit 2.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from vertex_trainer_tools import serving
from vertex_trainer_tools.errors import ToolError

DEFAULT_MODEL_DIR = serving.DEFAULT_MODEL_DIR  # the name of earlier versions


def command(args: argparse.Namespace) -> int:
    """``vertex-tools predict-local``: its options are declared in ``cli.py``."""
    if not args.instances:
        raise ToolError(
            "--instances: no request file given (e.g. make predict-local INSTANCES=instances.json)"
        )
    body = serving.read_request(args.instances)
    print(json.dumps(serving.predict(args.model_dir, body)))
    return 0


def main(argv: Sequence[str] | None = None, prog: str = "vertex-tools predict-local") -> int:
    """``vertex-tools predict-local ARGV``: the entry point of earlier versions, kept working."""
    from vertex_trainer_tools import cli

    return cli.main(["predict-local", *([] if argv is None else argv)])
