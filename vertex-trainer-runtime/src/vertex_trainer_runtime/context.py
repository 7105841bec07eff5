"""What a trainer's ``run(flags, ctx)`` is handed: :class:`RunContext`.

:mod:`vertex_trainer_runtime.task` parses the flags into the variant's ``Flags`` dataclass of
sections and builds the context once per process, so no variant reads Vertex's environment or
turns output dirs into file paths itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vertex_trainer_runtime import cli, hptune, ledger, runtime


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
    # The declaration run (trainer/spec.py's SPEC): a framework's run calls the user's functions
    # it names. None where a run is called without one (tests).
    spec: Any = None

    def metric_reporter(self, tag: str, enabled: bool | None = None) -> hptune.MetricReporter:
        """Reports ``tag`` for hyperparameter tuning; by default from the chief only."""
        return hptune.MetricReporter(tag, self.cluster.is_chief if enabled is None else enabled)


def build(flags: Any, environ: Mapping[str, str] | None = None, spec: Any = None) -> RunContext:
    """The context for a variant's parsed ``Flags``, the environment and the declaration."""
    # Trainers that write no TensorBoard logs have no cli.TensorBoardFlags section.
    tensorboard = getattr(flags, "tensorboard", None)
    dirs = runtime.resolve_output_dirs(
        flags.shared.model_dir,
        flags.shared.checkpoint_dir,
        getattr(tensorboard, "tensorboard_dir", None),
        flags.shared.job_dir,
        environ=environ,
    )
    ctx = RunContext(
        cluster=runtime.cluster_from_env(environ),
        model_dir=_output_dir(dirs.model_dir),
        checkpoint_dir=_output_dir(dirs.checkpoint_dir),
        tensorboard_dir=_output_dir(dirs.tensorboard_dir),
        spec=spec,
    )
    ledger.open_for(ctx.checkpoint_dir.path, ctx.cluster, environ)  # beside the checkpoints
    return ctx
