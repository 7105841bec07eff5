"""``vertex-tools``: one command line for everything that runs on your machine, never on Vertex.

Each subcommand is one tool of this package with its own ``--help``; the generated project's
Makefile calls them (``make submit`` is ``vertex-tools submit``), so a project's targets keep
their names while the tools behind them are updated by changing one pinned version.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from vertex_trainer_tools import __version__

# subcommand -> (module, arguments put before the user's, one-line help)
COMMANDS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "check": ("config", ("check",), "check vertex.yaml: schema, placeholders, Vertex names, study"),
    "get": ("config", ("get",), "print one value of vertex.yaml (dotted key or derived name)"),
    "show": ("config", ("show",), "print the checked config with its derived values as JSON"),
    "local-run": ("local_run.cli", (), "run the job of vertex.yaml here, emulating Vertex"),
    "submit": ("submit", (), "submit the CustomJob of vertex.yaml (--dry-run prints it)"),
    "submit-hpt": ("submit", ("--hpt",), "submit the hyperparameter-tuning study"),
    "upload-model": ("model_upload", (), "upload a job's model to the Model Registry (--dry-run)"),
    "gcloud-config": ("submit", ("--gcloud-config",), "write the spec as YAML for gcloud"),
    "build": ("build", ("build",), "build the training image (buildx, docker or Cloud Build)"),
    "push": ("build", ("push",), "push the built tags to Artifact Registry"),
    "build-push": ("build", ("build-push",), "build and push"),
    "base-image": ("base_image", (), "make an offline stand-in base image (debootstrap)"),
    "gcp-setup": ("gcp_setup", (), "enable the APIs, create the bucket and registry if missing"),
    "predict-local": ("serving.cli", (), "answer a Vertex prediction request with a model here"),
}


# Commands that read vertex.yaml or a user's files: whatever they hold, they end with ERROR
# lines, not a traceback.
READS_CONFIG = ("check", "get", "show", "submit", "submit-hpt", "upload-model", "gcloud-config")
READS_USER_FILES = (*READS_CONFIG, "local-run", "predict-local")
DEBUG_ENV = "VERTEX_TOOLS_DEBUG"


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help_}" for name, (_, _, help_) in COMMANDS.items()]
    summary = __doc__.splitlines()[0].partition(": ")[2]
    return (
        f"usage: vertex-tools [--version] COMMAND [ARGS...]\n\n{summary}\n\n"
        "commands (each has --help):\n" + "\n".join(lines) + "\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage(), end="")
        return 0 if args else 2
    if args[0] == "--version":
        print(f"vertex-trainer-tools {__version__}")
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(
            f"ERROR: vertex-tools: unknown command {command!r} (one of {', '.join(COMMANDS)})",
            file=sys.stderr,
        )
        return 2
    module_name, prefix, _ = COMMANDS[command]
    module = importlib.import_module(f"vertex_trainer_tools.{module_name}")
    if command not in READS_USER_FILES or os.environ.get(DEBUG_ENV):
        return module.main([*prefix, *rest], prog=f"vertex-tools {command}")
    try:
        return module.main([*prefix, *rest], prog=f"vertex-tools {command}")
    except Exception as error:  # noqa: BLE001 - the last resort: one line, never a traceback
        why = (str(error).splitlines() or [""])[0]
        print(
            f"ERROR: vertex-tools {command}: {type(error).__name__}: {why} "
            f"(a bug of vertex-trainer-tools: {DEBUG_ENV}=1 shows where)",
            file=sys.stderr,
        )
        return 1
