"""Checks of vertex.yaml against what lies outside it, before any API call.

- Vertex's own names: accelerator types and regions (from google-cloud-aiplatform when it is
  installed, else the copies in ``gcp_names.py``, which a test holds equal to it);
- the trainer: every ``job.args`` flag and every ``hpt.parameters`` id must be a flag of
  ``python -m trainer.task``, since Vertex passes ``--<id>=<value>`` and the trainer ignores
  flags it does not know (a typo would tune nothing); ``job.args``, ``ARGS`` and the values a
  study can pass must parse with the trainer's own parser (``trainer_args.py``);
  ``hpt.metric`` must be the tag and goal the trainer reports, and a Reduction Server needs a
  trainer that can use it;
- ``python_package.python_module`` must be a module of the project.

Nothing here imports the ML framework: the flags, the metric, the export file and what Reduction
Server means come from the project's declaration, ``SPEC`` of ``trainer/spec.py``, imported with
the framework-free modules it names (``vertex_trainer_runtime.spec.TrainerSpec``).
``vertex-tools check`` and ``submit.py`` run these checks.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from vertex_trainer_runtime import cli as runtime_cli
from vertex_trainer_runtime.spec import TrainerSpec
from vertex_trainer_runtime.spec import problems as spec_problems

from vertex_trainer_tools import gcp_names as names
from vertex_trainer_tools import schema
from vertex_trainer_tools.errors import ToolError
from vertex_trainer_tools.prediction_images import serving_image_problem
from vertex_trainer_tools.project import TRAINER_MODULE, project_root
from vertex_trainer_tools.trainer_args import Trainer, argument_problems, parameter_problem


def accelerator_types() -> set[str]:
    """Vertex's accelerator names: the SDK's enum when installed, else the copy above."""
    try:
        with _quiet():
            from google.cloud.aiplatform_v1.types import AcceleratorType
    except ImportError:
        return set(names.ACCELERATOR_TYPES)
    return {member.name for member in AcceleratorType}


def regions() -> set[str]:
    """Vertex's training regions: the SDK's ``SUPPORTED_REGIONS`` less "global" when installed,
    else the copy above."""
    try:
        with _quiet():
            from google.cloud.aiplatform.constants import base
    except ImportError:
        return set(names.REGIONS)
    return set(base.SUPPORTED_REGIONS) - {"global"}


@contextlib.contextmanager
def _quiet():
    """google-api-core warns, once per generated module, about Python versions it will drop."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        yield


@contextlib.contextmanager
def _trainer_package(root: Path):
    """Import the project's framework-free ``trainer`` modules from ``root``, then forget them
    (another project, or the same one edited, is read afresh)."""
    before = {name: module for name, module in sys.modules.items() if _is_trainer(name)}
    for name in before:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        sys.path.remove(str(root))
        for name in [name for name in sys.modules if _is_trainer(name)]:
            del sys.modules[name]
        sys.modules.update(before)


def _is_trainer(name: str) -> bool:
    return name == "trainer" or name.startswith("trainer.")


_imported: dict[tuple, tuple[TrainerSpec | None, Trainer | None]] = {}


def _imported_trainer(root: Path | None) -> tuple[TrainerSpec | None, Trainer | None]:
    """The project's declaration (``SPEC`` of ``trainer/spec.py``), imported once per version of
    its ``trainer/*.py`` files (an edited file is read afresh), and the ``Trainer`` that parses
    with it; ``(None, None)`` for a project without one."""
    root = root or project_root()
    folder = root / "trainer"
    if not (folder / "spec.py").is_file():
        return None, None
    files = sorted(folder.glob("*.py"))
    version = (str(root), tuple((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files))
    if version not in _imported:
        with _trainer_package(root):
            declared = getattr(importlib.import_module("trainer.spec"), "SPEC", None)
        found = spec_problems(declared)
        if found:
            raise ToolError(*found)
        _imported.clear()  # one project at a time
        _imported[version] = declared, Trainer(declared, runtime_cli)
    return _imported[version]


def trainer_spec(root: Path | None = None) -> TrainerSpec | None:
    """The project's declaration (framework-free); None for a project without one."""
    return _imported_trainer(root)[0]


def load_trainer(root: Path | None = None) -> Trainer | None:
    """The project's declared flags with the runtime's shared flags (framework-free), to parse
    arguments as the trainer will; None for a project without a declaration."""
    return _imported_trainer(root)[1]


def trainer_parser(root: Path | None = None) -> argparse.ArgumentParser | None:
    """``python -m trainer.task``'s parser, from the project's declaration (which imports no
    framework); None for a project without one."""
    spec = trainer_spec(root)
    return spec.parser() if spec else None


def no_reduction_server(root: Path | None = None) -> str | None:
    """Why the trainer cannot use Google's Reduction Server (``no_reduction_server`` of its
    declaration); None when it can, or for a project without one."""
    spec = trainer_spec(root)
    return spec.no_reduction_server if spec else None


def reduction_server_problems(job, root: Path | None = None) -> list[tuple[str, str]]:
    """``(key, why)`` when the job asks for a Reduction Server that its trainer cannot use: the
    reducer VMs would be paid for and idle."""
    key = job.reduction_server_key
    why = no_reduction_server(root) if key else None
    return [(f"job.{key}", f"this trainer cannot use Reduction Server: {why}")] if why else []


def trainer_flags(root: Path | None = None) -> dict[str, bool]:
    """``python -m trainer.task``'s flags, each mapped to whether it takes a value."""
    trainer = load_trainer(root)
    flags = trainer.flags_taking_values if trainer is not None else {}
    return {option: value for option, value in flags.items() if option != "--help"}


def reported_metric(trainer_args: Sequence[str], root: Path | None = None):
    """``(metric id, goal)`` the project's declaration reports with these arguments; None for a
    project without one, or arguments its parser refuses."""
    spec = trainer_spec(root)
    if spec is None:
        return None
    # A metric that follows the flags parses them, and must not print argparse's usage: the
    # arguments' own problems are reported by argument_lines.
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            return spec.reported_metric(list(trainer_args))
        except SystemExit:
            return None


def unknown_flags(trainer_args: Sequence[str], root: Path | None = None) -> list[tuple]:
    """``(index, argument, why)`` for ``--flags`` in the trainer's arguments that the trainer
    does not have: it would only warn and ignore them on Vertex, after the VMs started."""
    flags = {f[2:].replace("_", "-") for f in trainer_flags(root)}
    problems = []
    for index, argument in enumerate(trainer_args if flags else ()):
        if not argument.startswith("--") or argument in ("--", "--help"):
            continue
        name = argument[2:].partition("=")[0].replace("_", "-")
        if name not in flags:
            hint = schema.close_matches(name, flags) or " (see python -m trainer.task --help)"
            problems.append((index, repr(argument), f"the trainer has no flag --{name}{hint}"))
    return problems


def args_problems(trainer_args: Sequence[str], root: Path | None = None) -> list[tuple]:
    """``(key, why)`` for ``--flags`` in the trainer's arguments that the trainer does not have."""
    return [("job.args", f"{shown}: {why}") for _, shown, why in unknown_flags(trainer_args, root)]


def argument_lines(cfg, job_args: Sequence[str], extra_args: Sequence[str], root_node) -> list[str]:
    """One line per argument the trainer would ignore or refuse: located at its item of
    ``job.args``, or ``ARGS:`` for the extra arguments of ``make submit ARGS=...``."""
    args = [*job_args, *extra_args]
    found = unknown_flags(args)
    trainer = load_trainer()
    if trainer is not None:
        found += argument_problems(trainer, args)
    lines = []
    for index, shown, why in sorted(found, key=lambda item: item[0]):
        if index >= len(job_args):
            lines.append(f"ARGS: {shown}: {why}")
            continue
        line = schema.line_of(root_node, f"job.args[{index}]") if root_node is not None else 0
        where = f"{cfg.path}:{line}" if line else cfg.path
        lines.append(f"{where}: job.args: {shown}: {why}")
    return lines


def parameter_problems(
    hpt, trainer_args: Sequence[str] = (), root: Path | None = None
) -> list[tuple[str, str]]:
    """``(key, why)`` for study parameters whose values the trainer's parser would refuse, or
    (a categorical value) with which it would refuse to start or report another metric: every
    trial that draws one fails."""
    trainer = load_trainer(root)
    flags = trainer.flags_taking_values if trainer is not None else {}
    problems = []
    for parameter in hpt.parameters:
        if not flags.get("--" + parameter.id.replace("_", "-")):
            continue  # not a flag, or one without a value: hpt_problems says so
        found = parameter_problem(trainer, parameter)
        if found is None and parameter.type == "categorical":
            found = _categorical_metric_problem(hpt, parameter, trainer_args, root)
        if found:
            key, why = found
            problems.append((schema.join(f"hpt.parameters.{parameter.id}", key), why))
    return problems


def _categorical_metric_problem(hpt, parameter, trainer_args, root) -> tuple[str, str] | None:
    """A categorical value that the trainer's metric refuses (XGBoost's ``--objective``)
    or with which the trainer reports another metric than the study's."""
    for value in parameter.values:
        passed = f"--{parameter.id}={value}"
        try:
            reported = reported_metric([*trainer_args, passed], root)
        except ValueError as error:
            return "values", f"Vertex would pass {passed} and the trainer refuses it: {error}"
        if reported is not None and reported[0] != hpt.metric_id:
            return (
                "values",
                f"with {passed} the trainer reports {reported[0]!r}, not the study's "
                f"{hpt.metric_id!r}: those trials would report no metric",
            )
    return None


def hpt_problems(hpt, trainer_args: Sequence[str], root: Path | None = None) -> list[tuple]:
    """``(key, why)`` for study parameters the trainer lacks and a metric it does not report."""
    problems = []
    flags = {f[2:].replace("_", "-"): value for f, value in trainer_flags(root).items()}
    for parameter in hpt.parameters if flags else ():
        name = parameter.id.replace("_", "-")
        key = f"hpt.parameters.{parameter.id}"
        if name not in flags:
            known = [f.replace("-", "_") for f, value in flags.items() if value]
            hint = schema.close_matches(parameter.id.replace("-", "_"), known)
            problems.append(
                (
                    key,
                    f"not a flag of the trainer: Vertex would pass --{parameter.id}=<value> and "
                    f"the trainer ignores flags it does not know{hint}",
                )
            )
        elif not flags[name]:
            problems.append((key, f"--{name} takes no value: a study cannot set it"))
    try:
        reported = reported_metric(trainer_args, root)
    except ValueError as error:
        return [*problems, ("job.args", str(error))]
    if reported is None:
        return problems
    metric_id, goal = reported
    shown = " ".join(trainer_args) or "no job.args"
    if hpt.metric_id != metric_id:
        problems.append(
            (
                "hpt.metric.id",
                f"the trainer reports {metric_id!r} ({goal}) with {shown}, not "
                f"{hpt.metric_id!r} (e.g. id: {metric_id}, goal: {goal})",
            )
        )
    elif hpt.goal != goal:
        problems.append(
            ("hpt.metric.goal", f"{metric_id} is to {goal}, not {hpt.goal} (e.g. goal: {goal})")
        )
    return problems


def vertex_problems(cfg) -> list[tuple[str, str]]:
    """``(key, why)`` for names Vertex does not know: accelerator types, the region."""
    problems = []
    known = accelerator_types()
    for index, pool in enumerate(cfg.job.all_pools):
        if pool.accelerator_type not in known:
            problems.append(
                (
                    f"job.worker_pools[{index}].accelerator_type",
                    f"unknown accelerator {pool.accelerator_type!r}"
                    + (schema.close_matches(pool.accelerator_type, known) or " (e.g. NVIDIA_L4)"),
                )
            )
    all_regions = regions()
    if cfg.region and cfg.region not in all_regions:
        problems.append(
            (
                "region",
                f"{cfg.region!r} is not a Vertex AI training region"
                + (schema.close_matches(cfg.region, all_regions) or " (e.g. us-central1)"),
            )
        )
    return problems


def export_file(root: Path | None = None) -> str | None:
    """The file the project's trainer exports (``export_file`` of its declaration); None for a
    project without one."""
    spec = trainer_spec(root)
    return spec.export_file if spec else None


def serving_problems(cfg) -> list[tuple[str, str]]:
    """``model.serving_image`` must serve what the trainer exports: found now, not when a job
    that ran for hours uploads its model."""
    why = serving_image_problem(cfg.model.serving_image, export_file())
    return [("model.serving_image", why)] if why else []


def module_problems(cfg, root: Path | None = None) -> list[tuple[str, str]]:
    """``python_package.python_module`` must be a module of this project's package."""
    root = root or project_root()
    if cfg.python_package is None or not (root / "trainer").is_dir():
        return []
    module = cfg.python_package.python_module
    path = root.joinpath(*module.split("."))
    if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
        return []
    return [
        (
            "python_package.python_module",
            f"{module}: no such module in this project (e.g. {TRAINER_MODULE})",
        )
    ]


def problems(
    cfg,
    trainer_args: Sequence[str] | None = None,
    hpt: bool = True,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """Every pre-flight problem as one located line (``<file>:<line>: <key>: <why>``).

    ``trainer_args`` replaces ``job.args``; ``extra_args`` follow them (``ARGS``, reported as
    such)."""
    job_args = list(cfg.job.args) if trainer_args is None else list(trainer_args)
    args = [*job_args, *extra_args]
    root = cfg.document
    if root is None:
        try:
            root = schema.load_yaml(Path(cfg.path).read_text(encoding="utf-8"), cfg.path)
        except (OSError, ValueError, ToolError):  # UnicodeDecodeError is a ValueError
            root = None  # a Config built from a dict: no lines to show
    reader = schema.Reader(root, cfg.path)
    for key, why in vertex_problems(cfg) + reduction_server_problems(cfg.job):
        reader.problem(key, why)
    for key, why in module_problems(cfg) + serving_problems(cfg):
        reader.problem(key, why)
    reader.problems += argument_lines(cfg, job_args, extra_args, root)
    if hpt and cfg.hpt is not None:
        found = hpt_problems(cfg.hpt, args) + parameter_problems(cfg.hpt, args)
    else:
        found = metric_problems(args)
    for key, why in found:
        reader.problem(key, why)
    return reader.problems


def study_problems(cfg, extra_args: Sequence[str] = ()) -> list[str]:
    """What would fail a local study's trials before any starts: the study and the flags."""
    args = [*cfg.job.args, *extra_args]
    reader = schema.Reader(cfg.document, cfg.path)
    for key, why in hpt_problems(cfg.hpt, args) + parameter_problems(cfg.hpt, args):
        reader.problem(key, why)
    return reader.problems + argument_lines(cfg, cfg.job.args, extra_args, cfg.document)


def metric_problems(trainer_args: Sequence[str]) -> list[tuple[str, str]]:
    """The trainer's metric refuses the flags it follows (XGBoost: ``--objective``)."""
    try:
        reported_metric(trainer_args)
    except ValueError as error:
        return [("job.args", str(error))]
    return []
