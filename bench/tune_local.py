"""``make tune-local`` on 2 cores: a study's wall time with PARALLEL=1 and PARALLEL=2, and its best
trial against the default flags.

The targets: on the XGBoost demo data, a study with ``PARALLEL=2`` runs at least 1.3x as
fast as with ``PARALLEL=1``, and the best trial of a 6-trial study scores at least the default
flags' metric. Random search draws trial k's values from k alone (``HPT_TRIAL=k``), so both runs
train the same six trials: only the parallelism differs. Each pair runs in alternating order.

    .venv/bin/python bench/tune_local.py --python /path/to/venv-with-xgboost/bin/python

It bakes an XGBoost project into a temporary folder, runs it with that interpreter (which needs
the project's requirements and vertex-trainer-tools) and writes ``bench/results-tune.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE.parent
LOCAL_DATA = ["--train-data=synthetic", "--eval-data=synthetic"]


def bake(folder: Path, framework: str) -> Path:
    from cookiecutter.main import cookiecutter

    return Path(
        cookiecutter(
            str(TEMPLATE),
            no_input=True,
            output_dir=str(folder),
            extra_context={"framework": framework},
        )
    )


def tools(python: str, project: Path, *argv: str) -> str:
    command = [python, "-m", "vertex_trainer_tools", *argv]
    done = subprocess.run(command, cwd=project, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(
            f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr}"
        )
    return done.stdout


def study(python: str, project: Path, trials: int, parallel: int) -> tuple[float, float]:
    """(wall seconds, best metric) of one study."""
    started = time.perf_counter()
    out = tools(
        python,
        project,
        "tune-local",
        f"--trials={trials}",
        f"--parallel={parallel}",
        "--",
        *LOCAL_DATA,
    )
    seconds = time.perf_counter() - started
    best = re.search(r"best: trial \d+, \w+=([0-9.eE+-]+)", out)
    return seconds, float(best.group(1))


def default_metric(python: str, project: Path) -> float:
    out = tools(python, project, "local-run", "--", *LOCAL_DATA)
    found = re.search(r"last metric the chief reported: \w+=([0-9.eE+-]+)", out)
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="an interpreter with the project's needs")
    parser.add_argument("--framework", default="xgboost")
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--output", default=str(HERE / "results-tune.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tune-") as folder:
        project = bake(Path(folder), args.framework)
        runs = {1: [], 2: []}
        best = None
        for repeat in range(args.repeats):
            order = (1, 2) if repeat % 2 == 0 else (2, 1)
            for parallel in order:
                seconds, best = study(args.python, project, args.trials, parallel)
                runs[parallel].append(seconds)
                print(f"PARALLEL={parallel}: {seconds:.1f} s, best {best:.6g}", flush=True)
        default = default_metric(args.python, project)
    one, two = statistics.median(runs[1]), statistics.median(runs[2])
    result = {
        "framework": args.framework,
        "trials": args.trials,
        "cpus": len(os.sched_getaffinity(0)),
        "seconds_parallel_1": runs[1],
        "seconds_parallel_2": runs[2],
        "speedup_parallel_2": round(one / two, 3),
        "best_metric": best,
        "default_flags_metric": default,
        "date": time.strftime("%Y-%m-%d"),
    }
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    print(
        f"PARALLEL=2 / PARALLEL=1: {one / two:.2f}x (target >= 1.3x); "
        f"best {best:.6g} vs default {default:.6g}"
    )


if __name__ == "__main__":
    main()
