"""Checks of vertex.yaml against what lies outside it, before any API call.

- Vertex's own names: accelerator types and regions (from google-cloud-aiplatform when it is
  installed, else the copies below, which a test holds equal to it);
- the trainer: every ``hpt.parameters`` id must be a flag of ``python -m trainer.task``, since
  Vertex passes ``--<id>=<value>`` and the trainer ignores flags it does not know (a typo would
  tune nothing), and ``hpt.metric`` must be the tag and goal the trainer reports.

Nothing here imports the ML framework: the flags are read from the trainer's source with
``ast`` (``add_argument("--flag", ...)`` in ``trainer/task.py`` and the trainer modules it
imports), the metric from ``trainer/metric.py``, a framework-free module of the variant.
``vertex-tools check`` and ``submit.py`` run these checks.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from vertex_trainer_tools import gcp_names as names
from vertex_trainer_tools import schema
from vertex_trainer_tools.project import project_root

NO_VALUE_ACTIONS = ("store_true", "store_false", "store_const", "append_const", "count")


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


def trainer_flags(root: Path | None = None) -> dict[str, bool]:
    """``python -m trainer.task``'s flags, each mapped to whether it takes a value.

    Read from the source of ``trainer/task.py`` and of every trainer module it imports,
    directly or not: ``add_argument`` calls with ``--`` names (``BooleanOptionalAction`` adds
    ``--no-x``). Other programs in trainer/ (e.g. ``trainer/predict.py``) are not imported by
    the task, so their flags do not count.
    """
    package = (root or project_root()) / "trainer"
    todo = ["task"] if (package / "task.py").is_file() else [p.stem for p in package.glob("*.py")]
    seen: set[str] = set()
    flags: dict[str, bool] = {}
    while todo:
        name = todo.pop()
        path = package / f"{name}.py"
        if name in seen or not path.is_file():
            continue
        seen.add(name)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            todo.extend(_trainer_imports(node))
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                _add_flags(node, flags)
    return flags


def _trainer_imports(node: ast.AST) -> list[str]:
    """Modules of the trainer package that ``node`` imports."""
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        if (node.level == 1 and not module) or module == "trainer":
            return [alias.name for alias in node.names]
        if module.startswith("trainer.") or node.level == 1:
            return [module.removeprefix("trainer.").split(".")[0]]
    if isinstance(node, ast.Import):
        return [a.name.split(".")[1] for a in node.names if a.name.startswith("trainer.")]
    return []


def _add_flags(call: ast.Call, flags: dict[str, bool]) -> None:
    action = next((k.value for k in call.keywords if k.arg == "action"), None)
    boolean_optional = getattr(action, "attr", getattr(action, "id", "")) == "BooleanOptionalAction"
    takes_value = not (
        boolean_optional or isinstance(action, ast.Constant) and action.value in NO_VALUE_ACTIONS
    )
    for arg in call.args:
        if isinstance(arg, ast.Constant) and str(arg.value).startswith("--"):
            flags[arg.value] = takes_value
            if boolean_optional:
                flags["--no-" + arg.value[2:]] = False


def reported_metric(trainer_args: Sequence[str], root: Path | None = None):
    """``(metric id, goal)`` from the variant's ``trainer/metric.py``; None without one."""
    root = root or project_root()
    path = root / "trainer" / "metric.py"
    if not path.is_file():
        return None
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))  # it may import framework-free trainer modules
    spec = importlib.util.spec_from_file_location("_trainer_metric", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reported_metric(list(trainer_args))


def hpt_problems(hpt, trainer_args: Sequence[str], root: Path | None = None) -> list[tuple]:
    """``(key, why)`` for study parameters the trainer lacks and a metric it does not report."""
    problems = []
    root = root or project_root()
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
    found = vertex_problems(cfg)
    if hpt and cfg.hpt is not None:
        args = list(cfg.job.args) if trainer_args is None else list(trainer_args)
        found += hpt_problems(cfg.hpt, args)
    try:
        root = schema.load_yaml(Path(cfg.path).read_text(), cfg.path)
    except (OSError, schema.SchemaError):
        root = None  # a Config built from a dict: no lines to show
    reader = schema.Reader(root, cfg.path)
    for key, why in found:
        reader.problem(key, why)
    return reader.problems
