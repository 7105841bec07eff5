"""``vertex-tools``: one command line for everything that runs on your machine, never on Vertex.

The whole parser tree is here: each subcommand with its options, the options several share
(``--config``, ``--dry-run``) declared once as parent parsers, and the function that runs it
(imported only when it runs: ``--help`` needs no Google Cloud SDK). Whatever a command refuses or
fails on is a ``ToolError`` (``errors.py``), printed here once as ``ERROR:`` lines, with its exit
code: 2 for a mistake in what the command was given, 1 for a failure outside it. The generated
project's Makefile calls these commands (``make submit`` is ``vertex-tools submit``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vertex_trainer_tools import __version__, base_image, image_dates, serving
from vertex_trainer_tools import config as config_lib
from vertex_trainer_tools.errors import FAILED, USAGE, ToolError
from vertex_trainer_tools.local_run import options as local_run_options
from vertex_trainer_tools.project import LOCAL_JOBS, LOCAL_STUDIES
from vertex_trainer_tools.render import GCLOUD_DIR

DEBUG_ENV = "VERTEX_TOOLS_DEBUG"
TRAINER_ARGS_AFTER = "--"  # what follows is the trainer's: job.args + these
# The commands that pass the arguments after -- to the trainer.
TAKE_TRAINER_ARGS = ("local-run", "tune-local", "submit", "submit-hpt", "gcloud-config")


class OneLineParser(argparse.ArgumentParser):
    """argparse with its refusals as one ``ERROR:`` line, exit 2, like every other mistake: the
    usage of a command with many options fills a screen and buries the line that names the bad
    one."""

    commands: dict[str, OneLineParser]  # the top parser's: each command's parser, by name
    helps: dict[str, str]  # and its one-line help

    def error(self, message: str):
        self.exit(USAGE, f"ERROR: {message} (see {self.prog} --help)\n")


def _parent(flag: str, **settings) -> OneLineParser:
    """An option several commands share, declared once (argparse's parent parsers)."""
    parent = OneLineParser(add_help=False)
    parent.add_argument(flag, **settings)
    return parent


def build_parser() -> OneLineParser:
    """The parser tree: ``vertex-tools COMMAND [OPTIONS]``, with ``run`` set on each command to
    the ``module:function`` that runs it."""
    top = OneLineParser(prog="vertex-tools", description=__doc__.splitlines()[0])
    top.add_argument("--version", action="version", version=f"vertex-trainer-tools {__version__}")
    commands = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    top.commands, top.helps = {}, {}
    config = _parent("--config", default=None, help="the config file (default: vertex.yaml)")
    dry_run = _parent(
        "--dry-run", action="store_true", help="print what it would do (the request, the commands)"
    )

    def command(name: str, run: str, help_: str, parents=(config,), **settings):
        parser = commands.add_parser(name, help=help_, parents=list(parents), **settings)
        parser.set_defaults(run=run)
        top.commands[name], top.helps[name] = parser, help_
        return parser

    check = command("check", f"{__name__}:check", CHECK_HELP)
    check.add_argument(
        "--model-dir", default="", help="also check this export against model.serving_image"
    )
    get = command("get", f"{__name__}:get", GET_HELP)
    get.add_argument("key", help=f"one of {', '.join(config_lib.DERIVED_KEYS)} or a dotted key")
    command("show", f"{__name__}:show", SHOW_HELP)

    local_run = command(
        "local-run",
        "vertex_trainer_tools.local_run.cli:command",
        "run the job of vertex.yaml here, emulating Vertex",
        description=local_run_options.DESCRIPTION,
    )
    local_run_options.add_arguments(local_run)
    local_run.set_defaults(default_config=local_run_options.default_config)

    for name, help_, defaults in (
        ("submit", "submit the CustomJob of vertex.yaml (--dry-run prints it)", {}),
        ("submit-hpt", "submit the hyperparameter-tuning study", {"hpt": True}),
        ("gcloud-config", "write the spec as YAML for gcloud", {"gcloud_config": True}),
    ):
        submit = command(
            name,
            "vertex_trainer_tools.submit:submit",
            help_,
            parents=(config, dry_run),
            description="Submit vertex.yaml's job (or --hpt study) to Vertex AI.",
            epilog="Arguments after -- are appended to the trainer's args.",
        )
        add_submit_options(submit)
        submit.set_defaults(**defaults)

    upload = command(
        "upload-model",
        "vertex_trainer_tools.model_upload:command",
        "upload a job's model to the Model Registry (--dry-run)",
        parents=(config, dry_run),
        description="Upload a job's model to the Vertex AI Model Registry (model: in vertex.yaml).",
        epilog=UPLOAD_EPILOG,
    )
    upload.add_argument("--job", default="", help="the job whose model to upload (see below)")
    upload.add_argument("--jobs-root", default=str(LOCAL_JOBS), help=f"default: {LOCAL_JOBS}")
    upload.add_argument(
        "--metric", type=float, default=None, help="the final metric, when the job left none"
    )

    tune = command(
        "tune-local",
        "vertex_trainer_tools.tune_local:command",
        "run vertex.yaml's hpt study here, each trial a local job",
        description="Run the hyperparameter study of vertex.yaml here, as Vertex would.",
        epilog="Arguments after -- are appended to every trial's trainer args.",
    )
    tune.add_argument(
        "--study", default="", metavar="FOLDER|latest", help="resume this study's folder"
    )
    tune.add_argument("--trials", type=int, default=None, help="the budget (hpt.max_trial_count)")
    tune.add_argument(
        "--parallel", type=int, default=None, help="trials at once (hpt.parallel_trial_count)"
    )
    studies = str(LOCAL_STUDIES)
    tune.add_argument("--studies-root", default=studies, help=f"default: {studies}")
    tune.add_argument("--module", default="trainer.task", help="the module each replica runs")
    tune.set_defaults(default_config=local_run_options.default_config)

    report = command(
        "report",
        "vertex_trainer_tools.report:command",
        "what a job's VM-hours bought: goodput, lost work, a timeline",
        description="Goodput, lost work and where the time went, from a job's ledger.",
    )
    report.add_argument(
        "--job", default="", help="latest (default), a local job folder or a gs:// job output dir"
    )
    report.add_argument("--jobs-root", default=str(LOCAL_JOBS), help=f"default: {LOCAL_JOBS}")
    report.add_argument("--png", default="", help="the timeline (default: <job>/report.png)")

    for name, help_ in (
        ("build", "build the training image (buildx, docker or Cloud Build)"),
        ("push", "push the built tags to Artifact Registry"),
        ("build-push", "build and push"),
    ):
        build = command(name, "vertex_trainer_tools.build:command", help_, (config, dry_run))
        build.add_argument("--cloud-build", action="store_true", help="use gcloud builds submit")
        build.add_argument("--tag", default="", help="tag instead of the git SHA")
        build.add_argument("--base-image", default="", help="FROM image instead of the default")
        build.set_defaults(action=name)

    base = command(
        "base-image",
        "vertex_trainer_tools.base_image:command",
        "make an offline stand-in base image (debootstrap)",
        parents=(),
    )
    base.add_argument("--tag", default="", help=f"default: {base_image.REPOSITORY}:<suite>-<hash>")
    base.add_argument("--suite", default=base_image.DEFAULT_SUITE, help="Debian release")
    base.add_argument("--mirror", default=base_image.DEFAULT_MIRROR, help="Debian mirror URL")
    base.add_argument(
        "--print-tag", action="store_true", help="print the tag it would use and stop"
    )

    lock = command(
        "lock",
        "vertex_trainer_tools.lock:command",
        "pin the image's packages with hashes in requirements.lock (uv)",
        parents=(),
    )
    lock.add_argument("--python", required=True, help="the image's Python, e.g. 3.10")
    lock.add_argument("--platform", default="x86_64-manylinux_2_28", help="uv's --python-platform")
    lock.add_argument(
        "--from-base", action="append", default=[], help="what the base brings: torch==2.4.1"
    )
    lock.add_argument("--replace", action="append", default=[], help="xgboost-cpu=xgboost")

    command(
        "eject-runtime",
        "vertex_trainer_tools.eject:command",
        "copy vertex-trainer-runtime's modules into the project, to change them",
        parents=(),
        description=EJECT_DESCRIPTION,
    )

    command(
        "gcp-setup",
        "vertex_trainer_tools.gcp_setup:command",
        "enable the APIs, create the bucket and registry if missing",
        parents=(config, dry_run),
    )

    predict = command(
        "predict-local",
        "vertex_trainer_tools.serving.cli:command",
        "answer a Vertex prediction request with a model here",
        parents=(),
    )
    predict.add_argument(
        "--instances", required=True, help='request JSON file: {"instances": [...]}'
    )
    predict.add_argument(
        "--model-dir",
        default=serving.DEFAULT_MODEL_DIR,
        help=f"the export (default {serving.DEFAULT_MODEL_DIR})",
    )
    return top


CHECK_HELP = "check vertex.yaml: schema, placeholders, Vertex names, study"
GET_HELP = "print one value of vertex.yaml (dotted key or derived name)"
SHOW_HELP = "print the checked config with its derived values as JSON"
EJECT_DESCRIPTION = (
    "Copy the installed vertex-trainer-runtime's modules into the project's "
    "vertex_trainer_runtime/ (imports stay the same): setup.py packages it, the Dockerfile "
    "copies it, and requirements.txt no longer pins the runtime. Refused if already ejected."
)
UPLOAD_EPILOG = (
    "JOB: a Vertex CustomJob id (make submit prints it) or resource name, or a local job "
    f"folder; default (or 'latest'): the newest local job ({LOCAL_JOBS}/latest, from make "
    "train-local). A local model is copied to <staging_bucket>/models/<job>/model first."
)


def add_submit_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``submit``, ``submit-hpt`` and ``gcloud-config`` (one set, three names)."""
    add = parser.add_argument
    add("--hpt", action="store_true", help="submit the hyperparameter study")
    add(
        "--package",
        action="store_true",
        help="python-package mode: sdist on the prebuilt executor image, no custom image",
    )
    add(
        "--gcloud-config",
        action="store_true",
        help=f"write the spec as gcloud --config YAML under {GCLOUD_DIR}/ and print the command",
    )
    add(
        "--sync",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="wait for the job to end and fail if it fails (default: --sync)",
    )
    add(
        "--upload-model",
        action="store_true",
        help="after the job SUCCEEDED, upload its model (vertex-tools upload-model); --sync only",
    )
    add("--tag", default="", help="image tag to run instead of image.tag")
    add("--image", default="", help="full image URI instead of the config's")
    add("--display-name", default="", help="base name instead of the config's")
    add("--dist-dir", default="dist", help="where --package builds the sdist")
    add(
        "--skip-remote-checks",
        action="store_true",
        help="do not look up the buckets and the image before submitting",
    )


# ---------------------------------------------------------------------------------------------
# check, get, show: the config package reads and checks; printing it is the command line's.


def check(args: argparse.Namespace) -> int:
    from vertex_trainer_tools import preflight  # imports the Vertex SDK when installed: only here

    cfg = config_lib.load(args.config)
    problems = cfg.placeholders() + preflight.problems(cfg)
    for line in image_dates.check_warnings(cfg):  # refused where used: PACKAGE=1, an upload
        print(f"WARNING: {line}", file=sys.stderr)
    if args.model_dir:
        from vertex_trainer_tools.model_upload import artifact_problem

        found = artifact_problem(cfg.model.serving_image, args.model_dir)
        problems += [found] if found else []
    if problems:
        raise ToolError(*problems)
    from vertex_trainer_tools.lock import lock_problem

    stale = lock_problem(Path(cfg.path).parent)
    if stale:
        print(f"WARNING: {stale} (make build refuses it)", file=sys.stderr)
    print(f"{args.config}: OK")
    return 0


def get(args: argparse.Namespace) -> int:
    cfg = config_lib.load(args.config)
    try:
        value = cfg.get(args.key)
    except KeyError:
        raise ToolError(f"{args.config}: no key {args.key!r}") from None
    print(_format(value))
    return 0


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list | tuple):
        return json.dumps(value)
    return "" if value is None else str(value)


def show(args: argparse.Namespace) -> int:
    print(json.dumps(config_lib.load(args.config).as_dict(), indent=2))
    return 0


# ---------------------------------------------------------------------------------------------
# The one entry point.


def usage(parser: OneLineParser) -> str:
    """The commands with their one-line help (``vertex-tools``, ``vertex-tools --help``)."""
    width = max(map(len, parser.helps))
    lines = [f"  {name:<{width}}  {help_}" for name, help_ in parser.helps.items()]
    summary = __doc__.splitlines()[0].partition(": ")[2]
    return (
        f"usage: vertex-tools [--version] COMMAND [ARGS...]\n\n{summary}\n\n"
        "commands (each has --help):\n" + "\n".join(lines) + "\n"
    )


def parse(argv: Sequence[str], parser: OneLineParser | None = None) -> argparse.Namespace:
    """The parsed command line: the command's options, ``trainer_args`` (after ``--``) and
    ``config`` with its default resolved (local-run: the vertex.yaml at or above here)."""
    parser = parser or build_parser()
    argv = list(argv)
    trainer_args: list[str] = []
    if TRAINER_ARGS_AFTER in argv:
        split = argv.index(TRAINER_ARGS_AFTER)
        argv, trainer_args = argv[:split], argv[split + 1 :]
    args, unknown = parser.parse_known_args(argv)
    if args.command is None:
        parser.error("a command is needed")
    command = parser.commands[args.command]
    if unknown:
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    if trainer_args and args.command not in TAKE_TRAINER_ARGS:
        command.error(f"takes no trainer arguments: {' '.join(trainer_args)}")
    args.trainer_args = trainer_args
    if getattr(args, "config", "") is None:
        default = getattr(args, "default_config", None)
        args.config = default() if default else config_lib.DEFAULT_PATH
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage(parser), end="")
        return 0 if argv else USAGE
    if not argv[0].startswith("-") and argv[0] not in parser.commands:
        print(
            f"ERROR: vertex-tools: unknown command {argv[0]!r} "
            f"(one of {', '.join(parser.commands)})",
            file=sys.stderr,
        )
        return USAGE
    try:
        args = parse(argv, parser)
    except SystemExit as done:  # --help, --version, or argparse's one ERROR: line
        return done.code or 0
    module_name, _, function = args.run.partition(":")
    run = getattr(importlib.import_module(module_name), function)
    try:
        return run(args)
    except ToolError as error:
        for line in error.lines:
            print(f"ERROR: {line}", file=sys.stderr)
        return error.exit_code
    except Exception as error:
        if os.environ.get(DEBUG_ENV):
            raise
        why = (str(error).splitlines() or [""])[0]  # the last resort: one line, never a traceback
        print(
            f"ERROR: vertex-tools {args.command}: {type(error).__name__}: {why} "
            f"(a bug of vertex-trainer-tools: {DEBUG_ENV}=1 shows where)",
            file=sys.stderr,
        )
        return FAILED
