"""The contract between the trainer's ``trainer.task`` and its framework's ``trainer/train.py``.

Every variant provides the same names: ``trainer/flags.py`` (framework-free) its ``DESCRIPTION``
(the ``--help`` text), ``add_arguments(parser)`` (its own flags, next to the shared ones of
``vertex_trainer_runtime.cli``), ``parser()`` and ``NO_REDUCTION_SERVER`` (why the trainer
cannot use ``job.reduction_server``, or None); ``trainer/train.py`` its loop:

- ``run(args, ctx) -> int``: train, report the tuning metric, export; ``ctx`` is a
  :class:`RunContext`.

``task.py`` builds the context once per process, so no variant reads Vertex's environment or
turns output dirs into file paths itself.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

from vertex_trainer_runtime import cli, hptune, runtime


@dataclass(frozen=True)
class OutputDir:
    """One output dir, both as given and as a file-system path."""

    uri: str  # the flag or AIP_* value: gs:// stays gs:// (TensorFlow writes there itself)
    path: str | None  # for plain file I/O (gs://b/x -> /gcs/b/x); None: no /gcs/ mount
    problem: str | None = None  # why there is no path

    def local(self) -> str:
        """The file-system path; bad input (one ``ERROR:`` line) when the mount is missing."""
        if self.path is None:
            raise cli.InputError(self.problem)
        return self.path

    def __str__(self) -> str:
        return self.uri


def _output_dir(uri: str) -> OutputDir:
    try:
        return OutputDir(uri, runtime.local_path(uri))
    except RuntimeError as error:  # gs:// without the /gcs/ mount: fine until a file is written
        return OutputDir(uri, None, str(error))


@dataclass(frozen=True)
class RunContext:
    """What Vertex (or ``make train-local``) gives this replica, read once."""

    cluster: runtime.Cluster
    model_dir: OutputDir
    checkpoint_dir: OutputDir
    tensorboard_dir: OutputDir

    def metric_reporter(self, tag: str, enabled: bool | None = None) -> hptune.MetricReporter:
        """Reports ``tag`` for hyperparameter tuning; by default from the chief only."""
        return hptune.MetricReporter(tag, self.cluster.is_chief if enabled is None else enabled)


def build(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> RunContext:
    """The context for parsed shared flags (``cli.base_parser``) and the environment."""
    dirs = runtime.resolve_output_dirs(
        args.model_dir,
        args.checkpoint_dir,
        getattr(args, "tensorboard_dir", None),  # trainers that write no TensorBoard logs lack it
        args.job_dir,
        environ=environ,
    )
    return RunContext(
        cluster=runtime.cluster_from_env(environ),
        model_dir=_output_dir(dirs.model_dir),
        checkpoint_dir=_output_dir(dirs.checkpoint_dir),
        tensorboard_dir=_output_dir(dirs.tensorboard_dir),
    )
