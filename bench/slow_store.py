#!/usr/bin/env python3
"""Checkpoints on a slow store: how long training waits for them, synchronous vs background.

On Vertex the checkpoint dir is usually ``/gcs/...``, Cloud Storage through FUSE, which writes
far slower than local disk. This runs a generated project's trainer three ways, with its
checkpoint dir on a stand-in for such a store (every file copied into it takes size ÷ RATE to
arrive, 50 MB/s by default, enforced by a ``sitecustomize`` of this script's, outside the
trainer):

- ``none``: checkpoints written locally, never published (what training costs without them);
- ``sync``: each publish done inside the training step (the trainers before
  vertex_trainer_runtime.publisher);
- ``background``: the trainer as it is: published on a thread while training goes on.

Reported per mode: the process's wall time (median of --repeats), the seconds training waited
for checkpoints, and the checkpoint cost, wall time ÷ the ``none`` wall time.

    .venv/bin/python bench/slow_store.py --python <project>/.venv/bin/python --project <project> \\
        -- --model=resnet50 --weights=none --image-size=32 --synthetic-examples=512 --epochs=3
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

SITECUSTOMIZE = r'''
"""bench/slow_store.py's stand-in for a slow checkpoint store, and its publishing modes."""
import os, shutil, time

ROOT = os.environ["SLOW_STORE_ROOT"]
RATE = float(os.environ["SLOW_STORE_BYTES_PER_S"])
_copyfile = shutil.copyfile


def slow_copyfile(source, destination, *args, **kwargs):
    result = _copyfile(source, destination, *args, **kwargs)
    if os.path.abspath(destination).startswith(ROOT):
        time.sleep(os.path.getsize(destination) / RATE)  # the store's bandwidth
    return result


shutil.copyfile = slow_copyfile

MODE = os.environ["SLOW_STORE_MODE"]
if MODE != "background":
    from vertex_trainer_runtime import publisher

    _submit = publisher.Publisher.submit

    def submit(self, source, step, metadata=None, owned=True):
        started, before = time.monotonic(), self.waited_seconds
        if MODE == "none":
            if owned:
                shutil.rmtree(source, ignore_errors=True)
        else:  # sync: the publish inside the training step
            _submit(self, source, step, metadata, owned)
            self.wait()
        self.waited_seconds = before + time.monotonic() - started

    publisher.Publisher.submit = submit
'''
WAITED = re.compile(r"Training waited ([\d.]+) s for checkpoints to publish, then ([\d.]+) s")
MODES = ("none", "sync", "background")


def run_once(python: str, project: Path, trainer_args: list[str], mode: str, rate: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="slow-store-") as scratch:
        scratch = Path(scratch)
        (scratch / "hooks").mkdir()
        (scratch / "hooks" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        store = scratch / "store"
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("AIP_", "CLUSTER_SPEC", "TF_CONFIG", "CLOUD_ML_"))
        }
        env.update(
            PYTHONPATH=os.pathsep.join([str(scratch / "hooks"), str(project)]),
            SLOW_STORE_ROOT=str(store),
            SLOW_STORE_BYTES_PER_S=repr(rate),
            SLOW_STORE_MODE=mode,
            CLOUD_ML_HP_METRIC_FILE=str(scratch / "metrics"),
            TF_CPP_MIN_LOG_LEVEL="2",
            HF_HUB_OFFLINE="1",
        )
        argv = [python, "-m", "trainer.task", *trainer_args]
        argv += [f"--model-dir={scratch / 'model'}", f"--checkpoint-dir={store}"]
        started = time.monotonic()
        done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
        log = done.stdout + done.stderr
        if done.returncode != 0:
            raise RuntimeError(f"{mode}: exit {done.returncode}\n{log[-3000:]}")
        waited = WAITED.findall(log)  # one line per task
        sizes = [f.stat().st_size for f in store.rglob("*") if f.is_file()]
        return {
            "wall_s": wall,
            "waited_s": sum(float(during) for during, _ in waited),
            "last_s": sum(float(last) for _, last in waited),
            "published": len(re.findall(r"Checkpoint \d+ saved to", log)),
            "checkpoint_mb": round(sum(sizes) / 2 / 1e6, 1),  # two kept
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the project's Python")
    parser.add_argument("--project", required=True, type=Path, help="a generated project")
    parser.add_argument("--rate-mb", type=float, default=50.0, help="the store's MB/s")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("trainer_args", nargs="*", help="after --: the trainer's flags")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for repeat in range(args.repeats):
        for mode in MODES if repeat % 2 == 0 else reversed(MODES):
            rate = args.rate_mb * 1e6
            result = run_once(args.python, args.project, args.trainer_args, mode, rate)
            print(f"{mode:>10}: {json.dumps(result)}", file=sys.stderr, flush=True)
            runs[mode].append(result)
    none = statistics.median(r["wall_s"] for r in runs["none"])
    summary = {}
    for mode in MODES:
        wall = statistics.median(r["wall_s"] for r in runs[mode])
        summary[mode] = {
            "wall_s": round(wall, 1),
            "waited_s": round(statistics.median(r["waited_s"] for r in runs[mode]), 1),
            "last_s": round(statistics.median(r["last_s"] for r in runs[mode]), 1),
            "checkpoint_cost": round(wall / none, 3),
            "published": runs[mode][0]["published"],
        }
    summary["checkpoint_mb"] = runs["background"][0]["checkpoint_mb"]
    summary["store_mb_per_s"] = args.rate_mb
    summary["trainer_args"] = args.trainer_args
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
