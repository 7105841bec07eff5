"""Test hooks that the drills load into the trainer, so that no trainer or runtime module reads
a variable only tests set. Each acts only when its variable is set:

- ``VERTEX_TRAINER_DRILL_STEP_SECONDS``: every training step (a Keras batch, a PyTorch step, an
  XGBoost round) takes at least this long, and so does the end of XGBoost's training (before the
  final evaluation, which takes time with a real model): the preemption drills then run at the
  step times of the models people pay GPUs for, on a laptop CPU.
- ``VERTEX_API_ENDPOINT``: the Experiment run goes to this REST stand-in (the tools'
  ``experiments_stand_in``), without credentials.

How they get there: ``sitecustomize.py`` beside this file, with this folder on the replicas'
Python path. ``vertex-tools local-run`` puts it there when ``LOCAL_RUN_HOOKS`` names the folder
(mounted read-only into each container with ``--image``); the tools' test helpers
(``testing.run_local_job``, ``trainer_runs.start_trainer``) do that for every job and trainer they
start. Standard library only: a container has the runtime, not the tools. Each patch waits for
its module's import (a finder on ``sys.meta_path``), so a process that never imports a framework
imports nothing more.
"""

from __future__ import annotations

import functools
import importlib.abc
import os
import sys
import time

STEP_SECONDS_ENV = "VERTEX_TRAINER_DRILL_STEP_SECONDS"
ENDPOINT_ENV = "VERTEX_API_ENDPOINT"
RUNTIME = "vertex_trainer_runtime"


def step_seconds() -> float:
    """The drills' step time (0: not a drill)."""
    try:
        return max(0.0, float(os.environ.get(STEP_SECONDS_ENV) or 0))
    except ValueError:
        return 0.0


def paused(method, seconds: float, after: bool = False, unless=None):
    """``method`` with a sleep of ``seconds`` before it (``after``: once it returned), skipped
    when ``unless(self)`` is true."""

    @functools.wraps(method)
    def slowed(self, *args, **kwargs):
        pause = 0.0 if unless is not None and unless(self) else seconds
        if not after:
            time.sleep(pause)
        result = method(self, *args, **kwargs)
        if after:
            time.sleep(pause)
        return result

    slowed.drill_hook = True
    return slowed


def patch(cls, name: str, wrap) -> None:
    """Replace ``cls.name`` by ``wrap(cls.name)``, once (a second install changes nothing)."""
    method = getattr(cls, name)
    if not getattr(method, "drill_hook", False):
        setattr(cls, name, wrap(method))


def slow_keras(module) -> None:
    seconds = step_seconds()
    patch(module.CheckpointCallback, "on_train_batch_end", lambda m: paused(m, seconds))


def slow_torch(module) -> None:
    # After the step's flags are shared, as the step's own work comes after them.
    seconds = step_seconds()
    patch(module.MirrorCheckpoints, "on_step_begin", lambda m: paused(m, seconds, after=True))


def slow_xgboost(module) -> None:
    seconds, stop = step_seconds(), module.StopOnNotice
    patch(stop, "before_iteration", lambda m: paused(m, seconds))
    # The last callback's end of training: the final checkpoint is saved, the evaluation next;
    # a replica that stops for a notice goes straight on to exit.
    patch(stop, "after_training", lambda m: paused(m, seconds, unless=noticed))


def noticed(hook) -> bool:
    return hook.notice.received


def stand_in_endpoint(start):
    """``Tracker._start`` with ``aiplatform.init`` sent to ``VERTEX_API_ENDPOINT`` over REST,
    without credentials, for the time of the call."""

    @functools.wraps(start)
    def started(self, *args, **kwargs):
        endpoint = os.environ.get(ENDPOINT_ENV)
        if not endpoint:
            return start(self, *args, **kwargs)
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import aiplatform

        init = aiplatform.init
        aiplatform.init = functools.partial(
            init, api_endpoint=endpoint, api_transport="rest", credentials=AnonymousCredentials()
        )
        try:
            return start(self, *args, **kwargs)
        finally:
            aiplatform.init = init

    started.drill_hook = True
    return started


def track_at_stand_in(module) -> None:
    patch(module.Tracker, "_start", stand_in_endpoint)


class _Patching(importlib.abc.Loader):
    """A module's own loader, then its patch."""

    def __init__(self, loader, apply):
        self.loader, self.apply = loader, apply

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.apply(module)

    def __getattr__(self, name):  # get_source, get_resource_reader ...: the module's loader
        if name == "loader":  # not set yet (a copy): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds the patched modules as the other finders do; their loader then patches them."""

    def __init__(self, patches: dict):
        self.patches = patches

    def find_spec(self, name, path=None, target=None):
        if name not in self.patches:
            return None
        for finder in sys.meta_path:
            found = finder is not self and getattr(finder, "find_spec", None)
            spec = found(name, path, target) if found else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Patching(spec.loader, self.patches[name])
                return spec
        return None


def patches() -> dict:
    """The patches this process's environment asks for, by module name."""
    wanted = {}
    if step_seconds():
        wanted[f"{RUNTIME}.keras.checkpoint_callback"] = slow_keras
        wanted[f"{RUNTIME}.torch.checkpoint_mirror"] = slow_torch
        wanted[f"{RUNTIME}.xgboost.preemption_hook"] = slow_xgboost
    if os.environ.get(ENDPOINT_ENV):
        wanted[f"{RUNTIME}.tracking"] = track_at_stand_in
    return wanted


def install() -> None:
    """Patch what is imported already, and the rest as it is imported."""
    wanted = patches()
    for name, apply in list(wanted.items()):
        if name in sys.modules:
            apply(sys.modules[name])
            del wanted[name]
    if wanted:
        sys.meta_path.insert(0, _AfterImport(wanted))
