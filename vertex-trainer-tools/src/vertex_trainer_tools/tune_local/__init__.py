"""``vertex-tools tune-local`` (``make tune-local``): the study of vertex.yaml, run here.

The same spec that ``make submit-hpt`` sends: parameters, metric and goal, budget, parallel
trials, failures allowed, measurement selection, algorithm and early stopping. Each trial is a
job of the local emulator with its trial id, and the study keeps everything in
``outputs/studies/<hpt.display_name>-<time>/`` (``latest`` names the newest):

- ``journal.jsonl``: the study's record (``journal.py``); ``STUDY=latest`` resumes from it;
- ``trials/<id>/``: each trial's job folder (its outputs under ``<id>/``, as Vertex's
  ``<baseOutputDirectory>/<trial id>/``) and ``log.txt``;
- ``trials.csv``, ``trials.md``, ``best.json``, ``study.png`` (``outputs.py``).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from vertex_trainer_tools.errors import FAILED, ToolError
from vertex_trainer_tools.local_run import folders
from vertex_trainer_tools.project import project_root


def spec_of(cfg) -> dict:
    """The parts of the study that must not change when a study is resumed."""
    return cfg.hpt.model_dump(mode="json")


def command(args: argparse.Namespace) -> int:
    from vertex_trainer_tools import config as config_lib
    from vertex_trainer_tools.tune_local import journal as journal_lib
    from vertex_trainer_tools.tune_local import outputs
    from vertex_trainer_tools.tune_local.runner import Settings, StudyRun

    cfg = config_lib.load(args.config)
    if cfg.hpt is None:
        raise ToolError(f"{args.config}: no hpt section: a local study runs vertex.yaml's study")
    for name in ("trials", "parallel"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ToolError(f"--{name} ({name.upper()}=) must be 1 or more")
    root = Path(args.studies_root)
    try:
        folder = _study_folder(args.study, root) if args.study else None
    except ValueError as error:
        raise ToolError(str(error)) from None
    if args.module == "trainer.task":
        _check_trainer(cfg, args.trainer_args)
    try:
        if folder is not None:
            journal = journal_lib.read(folder)
        else:
            folder = folders.new_job_folder(root, cfg.hpt.display_name)
            journal = journal_lib.Journal(folder)
        lock = journal_lib.lock(folder)
    except (OSError, ValueError) as error:
        raise ToolError(str(error)) from None
    try:
        if not args.study:
            journal.start(
                {
                    "hpt": spec_of(cfg),
                    "trials": args.trials or cfg.hpt.max_trial_count,
                    "parallel": args.parallel or cfg.hpt.parallel_trial_count,
                    "trainer_args": list(args.trainer_args),
                    "module": args.module,
                    "seed": random.SystemRandom().randrange(1, 10**6),
                }
            )
        else:
            try:
                _check_resume(journal, cfg, args)
            except ValueError as error:
                raise ToolError(str(error)) from None
        folders.point_latest(root, folder)
        spec = journal.spec
        settings = Settings(
            config=str(Path(args.config).resolve()),
            module=spec["module"],
            trainer_args=list(spec["trainer_args"]),
            trials=args.trials or spec["trials"],
            parallel=min(args.parallel or spec["parallel"], args.trials or spec["trials"]),
            seed=spec["seed"],
            trial_env=_experiment_runs(cfg, folder),
        )
        counts = journal.counts()
        kept = counts["SUCCEEDED"] + counts["STOPPED"] + counts["FAILED"]
        resumed = f", {kept} finished trials kept" if args.study else ""
        print(
            f"tune_local | study {cfg.hpt.display_name}: {cfg.hpt.algorithm} search for the "
            f"{cfg.hpt.goal} {cfg.hpt.metric_id}, {settings.trials} trials, "
            f"{settings.parallel} at a time{resumed}",
            flush=True,
        )
        print(f"tune_local | study folder: {folder}/", flush=True)
        status, why = StudyRun(journal, cfg.hpt, settings, say=_say).run()
        top = outputs.write(journal, cfg.hpt)
    finally:
        lock.close()
    print((folder / "trials.md").read_text(encoding="utf-8"), end="", flush=True)
    if top is not None:
        print(
            f"tune_local | best: trial {top.id}, {cfg.hpt.metric_id}={top.final:.6g}; as "
            f"job.args: [{', '.join(outputs.job_args(top))}] (best.json)",
            flush=True,
        )
    print(f"tune_local | study folder: {folder}/ (trials.md, best.json, study.png)", flush=True)
    if why and why != "interrupted":
        raise ToolError(why, exit_code=FAILED)
    if top is None and not why and journal.trials:
        raise ToolError(
            f"the study ended with no completed trial: see {folder / 'trials.md'}",
            exit_code=FAILED,
        )
    if why:
        print("tune_local | interrupted: `make tune-local STUDY=latest` runs the rest", flush=True)
    return status


def _experiment_runs(cfg, folder: Path):
    """With ``job.experiment``: each trial's Experiment run, ``<study folder>-<trial id>``,
    named to its trainer as ``make submit`` names a job's run (the trainer makes it if missing,
    and resumes it when the trial runs again). Vertex gives a tuning trial no run."""
    if not cfg.job.experiment:
        return None
    from vertex_trainer_tools import render

    def env(trial: int) -> dict[str, str]:
        return render.experiment_env(cfg, render.experiment_run(cfg, f"{folder.name}-{trial}"))

    return env


def _say(line: str) -> None:
    print(line, flush=True)


def _check_trainer(cfg, trainer_args) -> None:
    """The checks ``make check`` makes of the study, and that this Python runs the trainer."""
    from vertex_trainer_tools import preflight
    from vertex_trainer_tools.local_run import preflight as runnable

    problem = runnable.check(project_root())
    if problem:
        raise ToolError(problem.removeprefix("ERROR: "))
    lines = preflight.study_problems(cfg, trainer_args)
    if lines:
        raise ToolError(*lines)


def _study_folder(value: str, root: Path) -> Path:
    if value == folders.LATEST:
        folder = folders.read_latest(root)
        if folder is None:
            raise ValueError(f"--study: no {root / folders.LATEST} yet (run make tune-local first)")
        return folder
    folder = Path(value).expanduser()
    if not folder.is_dir():
        raise ValueError(f"--study: {value} is not a study folder (e.g. STUDY=latest)")
    return folder.resolve()


def _check_resume(journal, cfg, args) -> None:
    """A resumed study is the same study: the same spec and trainer flags."""
    before, now = journal.spec["hpt"], spec_of(cfg)
    changed = sorted(key for key in set(before) | set(now) if before.get(key) != now.get(key))
    if changed:
        raise ValueError(
            f"{args.config}: hpt.{changed[0]} changed since this study began in "
            f"{journal.folder}: start a new study (make tune-local without STUDY)"
        )
    if args.trainer_args and list(args.trainer_args) != journal.spec["trainer_args"]:
        raise ValueError(
            f"trainer flags {' '.join(args.trainer_args)} differ from the study's own "
            f"({' '.join(journal.spec['trainer_args']) or 'none'}): start a new study for them"
        )
