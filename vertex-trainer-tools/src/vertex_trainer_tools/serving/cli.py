"""``vertex-tools predict-local --instances FILE [--model-dir DIR]``: a Vertex prediction request
answered here by the exported model, through the serving path of its prebuilt container.

Prints the response, ``{"predictions": [...]}``. A missing or malformed request file, or a model
dir without the artifact a container loads, is one ``ERROR:`` line and exit 2.
"""

from __future__ import annotations

import argparse
import json

from vertex_trainer_tools import serving
from vertex_trainer_tools.errors import ToolError


def command(args: argparse.Namespace) -> int:
    """``vertex-tools predict-local``: its options are declared in ``cli.py``."""
    if not args.instances:
        raise ToolError(
            "--instances: no request file given (e.g. make predict-local INSTANCES=instances.json)"
        )
    body = serving.read_request(args.instances)
    print(json.dumps(serving.predict(args.model_dir, body)))
    return 0
