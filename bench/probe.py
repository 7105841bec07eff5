"""Run a module or script and record when each of its training steps starts.

``python bench/probe.py <hook> <out.json> [--disable module:Class.method] -m trainer.task
[args...]`` (or a script path instead of ``-m module``). The harness puts the wall-clock time
just before it started this process in ``BENCH_T0``; at exit the probe writes ``steps``, the
start of every training step in seconds since then, and ``cpu``, the process's CPU time (all
threads) at the same moments. ``steps[0]`` is the start-up time (interpreter, imports, data
loading, model setup); differences between later steps give the training throughput with
start-up and export left out.

Hooks patch the framework only after the code under test imports it, so nothing is imported
earlier or in another order than in a normal run:
- keras: ``CallbackList.on_train_batch_begin`` (``model.fit`` calls it every step);
- torch: a global optimizer step pre-hook (every ``optimizer.step()``, Trainer or not);
- xgboost: ``Booster.update`` (one boosting round).

``--disable`` turns one function of the code under test into a no-op, for the "no checkpoints"
runs of trainers that have no flag to switch checkpoints off.

``BENCH_STOP_AT_STEP=N`` ends the process (exit 0, timestamps saved) when step N starts: the
GPU benchmark stops there once its window is timed instead of waiting for the final
evaluation, checkpoint and export (seconds each for BERT-base), which it does not measure.
"""

from __future__ import annotations

import importlib.abc
import json
import os
import runpy
import sys
import time

T0 = float(os.environ.get("BENCH_T0", time.time()))
STOP_AT_STEP = int(os.environ.get("BENCH_STOP_AT_STEP", "0"))


class _Record:
    """Called at the start of every training step; ``save`` writes the timestamps."""

    def __init__(self, path: str):
        self.path = path
        self.steps: list[float] = []
        self.cpu: list[float] = []

    def __call__(self, *_args, **_kwargs) -> None:
        self.steps.append(time.time() - T0)
        self.cpu.append(time.process_time())
        if len(self.steps) == STOP_AT_STEP:
            self.save()
            sys.stdout.flush()
            os._exit(0)  # skip the rest of the run: nothing after the window is measured

    def save(self) -> None:
        with open(self.path, "w", encoding="utf-8") as handle:
            json.dump({"steps": self.steps, "cpu": self.cpu}, handle)


def when_imported(name: str, callback) -> None:
    """Call ``callback(module)`` right after ``name`` is first imported."""

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            sys.meta_path.remove(self)
            spec = None
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                spec = find(fullname, path, target) if find else None
                if spec is not None:
                    break
            if spec is None or spec.loader is None:
                return spec
            original = spec.loader.exec_module

            def exec_module(module):
                original(module)
                callback(module)

            spec.loader.exec_module = exec_module
            return spec

    if name in sys.modules:
        callback(sys.modules[name])
    else:
        sys.meta_path.insert(0, Finder())


def hook_keras(record: _Record) -> None:
    def patch(module):
        original = module.CallbackList.on_train_batch_begin

        def on_train_batch_begin(self, *args, **kwargs):
            record()
            return original(self, *args, **kwargs)

        module.CallbackList.on_train_batch_begin = on_train_batch_begin

    when_imported("tf_keras.src.callbacks", patch)


def hook_torch(record: _Record) -> None:
    when_imported(
        "torch.optim.optimizer", lambda module: module.register_optimizer_step_pre_hook(record)
    )


def hook_xgboost(record: _Record) -> None:
    def patch(module):
        original = module.Booster.update

        def update(self, *args, **kwargs):
            record()
            return original(self, *args, **kwargs)

        module.Booster.update = update

    when_imported("xgboost.core", patch)


HOOKS = {"keras": hook_keras, "torch": hook_torch, "xgboost": hook_xgboost}


def disable(target: str) -> None:
    """``module:Class.method`` (or ``module:function``) does nothing once imported."""
    module_name, _, attribute = target.partition(":")
    owner_path, _, name = attribute.rpartition(".")

    def patch(module):
        owner = module
        for part in filter(None, owner_path.split(".")):
            owner = getattr(owner, part)
        setattr(owner, name, lambda *args, **kwargs: None)

    when_imported(module_name, patch)


def main() -> None:
    hook, out, *rest = sys.argv[1:]
    record = _Record(out)
    HOOKS[hook](record)
    if rest[0] == "--disable":
        disable(rest[1])
        rest = rest[2:]
    try:
        if rest[0] == "-m":
            sys.path.insert(0, os.getcwd())  # as ``python -m`` does
            sys.argv = [rest[1], *rest[2:]]
            runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = rest
            sys.path.insert(0, os.path.dirname(os.path.abspath(rest[0])))
            runpy.run_path(rest[0], run_name="__main__")
    finally:
        record.save()


if __name__ == "__main__":
    main()
