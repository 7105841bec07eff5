"""Checks of vertex.yaml against what lies outside it, before any API call.

- Vertex's own names: accelerator types and regions (from google-cloud-aiplatform when it is
  installed, else the copies in ``gcp_names.py``, which a test holds equal to it);
- the trainer: every ``job.args`` flag and every ``hpt.parameters`` id must be a flag of
  ``python -m trainer.task``, since Vertex passes ``--<id>=<value>`` and the trainer ignores
  flags it does not know (a typo would tune nothing), ``hpt.metric`` must be the tag and
  goal the trainer reports, and a Reduction Server needs a trainer that can use it.

Nothing here imports the ML framework: the flags come from the project's ``trainer/flags.py``
and the metric from ``trainer/metric.py``, framework-free modules of the variant, imported.
``vertex-tools check`` and ``submit.py`` run these checks.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from vertex_trainer_tools import gcp_names as names
from vertex_trainer_tools import schema
from vertex_trainer_tools.project import project_root


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


def trainer_parser(root: Path | None = None) -> argparse.ArgumentParser | None:
    """``python -m trainer.task``'s parser, from the variant's ``trainer/flags.py`` (which imports
    no framework); None for a project without one."""
    root = root or project_root()
    if not (root / "trainer" / "flags.py").is_file():
        return None
    with _trainer_package(root):
        return importlib.import_module("trainer.flags").parser()


def no_reduction_server(root: Path | None = None) -> str | None:
    """Why the trainer cannot use Google's Reduction Server (``NO_REDUCTION_SERVER`` of its
    ``trainer/flags.py``); None when it can, or for a project without one."""
    root = root or project_root()
    if not (root / "trainer" / "flags.py").is_file():
        return None
    with _trainer_package(root):
        return getattr(importlib.import_module("trainer.flags"), "NO_REDUCTION_SERVER", None)


def reduction_server_problems(job, root: Path | None = None) -> list[tuple[str, str]]:
    """``(key, why)`` when the job asks for a Reduction Server that its trainer cannot use: the
    reducer VMs would be paid for and idle."""
    key = job.reduction_server_key
    why = no_reduction_server(root) if key else None
    return [(f"job.{key}", f"this trainer cannot use Reduction Server: {why}")] if why else []


def trainer_flags(root: Path | None = None) -> dict[str, bool]:
    """``python -m trainer.task``'s flags, each mapped to whether it takes a value."""
    parser = trainer_parser(root)
    if parser is None:
        return {}
    return {
        option: action.nargs != 0
        for action in parser._actions  # argparse keeps no public list of its options
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }


def reported_metric(trainer_args: Sequence[str], root: Path | None = None):
    """``(metric id, goal)`` from the variant's ``trainer/metric.py``; None without one."""
    root = root or project_root()
    if not (root / "trainer" / "metric.py").is_file():
        return None
    with _trainer_package(root):
        return importlib.import_module("trainer.metric").reported_metric(list(trainer_args))


def args_problems(trainer_args: Sequence[str], root: Path | None = None) -> list[tuple]:
    """``(key, why)`` for ``--flags`` in the trainer's arguments that the trainer does not have:
    it would only warn and ignore them on Vertex, after the VMs started."""
    flags = {f[2:].replace("_", "-") for f in trainer_flags(root)}
    problems = []
    for argument in trainer_args if flags else ():
        if not argument.startswith("--"):
            continue
        name = argument[2:].partition("=")[0].replace("_", "-")
        if name not in flags:
            problems.append(
                (
                    "job.args",
                    f"{argument!r}: the trainer has no flag --{name}"
                    + (schema.close_matches(name, flags) or " (see python -m trainer.task --help)"),
                )
            )
    return problems


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


def problems(cfg, trainer_args: Sequence[str] | None = None, hpt: bool = True) -> list[str]:
    """Every pre-flight problem as one located line (``<file>:<line>: <key>: <why>``)."""
    found = vertex_problems(cfg) + reduction_server_problems(cfg.job)
    args = list(cfg.job.args) if trainer_args is None else list(trainer_args)
    found += args_problems(args)
    if hpt and cfg.hpt is not None:
        found += hpt_problems(cfg.hpt, args)
    try:
        root = schema.load_yaml(Path(cfg.path).read_text(), cfg.path)
    except (OSError, schema.SchemaError):
        root = None  # a Config built from a dict: no lines to show
    reader = schema.Reader(root, cfg.path)
    for key, why in found:
        reader.problem(key, why)
    return reader.problems
