"""``vertex-tools predict-local --instances FILE [--model-dir DIR]``: a Vertex prediction request
answered here by the exported model, through the serving path of its prebuilt container.

Prints the response, ``{"predictions": [...]}``. A missing or malformed request file, or a model
dir without the artifact a container loads, is one ``ERROR:`` line and exit 2.
"""

from __future__ import annotations

import json
import sys

from vertex_trainer_tools import serving
from vertex_trainer_tools.local_run.options import OneLineParser

DEFAULT_MODEL_DIR = "outputs/local/latest/model"  # the newest `make train-local` job's export


def main(argv: list[str] | None = None, prog: str = "vertex-tools predict-local") -> int:
    parser = OneLineParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--instances", required=True, help='request JSON file: {"instances": [...]}'
    )
    parser.add_argument(
        "--model-dir", default=DEFAULT_MODEL_DIR, help=f"the export (default {DEFAULT_MODEL_DIR})"
    )
    args = parser.parse_args(argv)
    if not args.instances:
        print(
            "ERROR: --instances: no request file given (e.g. make predict-local "
            "INSTANCES=instances.json)",
            file=sys.stderr,
        )
        return 2
    try:
        body = serving.read_request(args.instances)
        response = serving.predict(args.model_dir, body)
    except serving.ServingError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 2
    print(json.dumps(response))
    return 0
