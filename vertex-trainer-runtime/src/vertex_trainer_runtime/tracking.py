"""Log the run to its Vertex AI Experiment run: flags, each evaluation, the exported model's metric.

How the container learns its run: from ``AIP_EXPERIMENT_NAME`` and ``AIP_EXPERIMENT_RUN_NAME``,
the variables the SDK itself reads (google-cloud-aiplatform 2.7.0:
``aiplatform/metadata/constants.py`` ``ENV_EXPERIMENT_KEY``/``ENV_EXPERIMENT_RUN_KEY``, read by
``metadata.py``'s ``experiment``/``experiment_run``, which accept a name or a full resource name)
and that the SDK's preview ``CustomJob.submit`` puts into every worker pool's env. The v1
``CustomJob.submit(experiment=, experiment_run=)`` only sets ``jobSpec.experiment`` and
``jobSpec.experimentRun``; Vertex documents no variable it derives from them, and without
``experiment_run`` Vertex makes a run of its own that the container cannot name (jobs.py:
"an ExperimentRun resource will still be auto-generated"). So ``vertex-tools submit`` makes the
run, passes it as ``experiment_run`` and puts both names, as full resource names (which carry
the project and region), in the job's env; a plain name takes them from ``CLOUD_ML_PROJECT_ID``
and ``CLOUD_ML_REGION``.

Tuning trials on Vertex are not tracked: ``HyperparameterTuningJob.run`` takes no experiment,
so Vertex names a trial no run; ``make tune-local`` names one per trial (``<study>-<trial>``),
which is tracked like a job's. Only the chief logs. ``google-cloud-aiplatform`` is imported
only when an experiment is set, so the image needs it then (Google's Deep Learning Containers
include it). Any failure of the API costs one warning line and turns tracking off; it never
fails the training run (an unreachable API: after the SDK's retries, up to 120 s, once).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from vertex_trainer_runtime import ledger

logger = logging.getLogger(__name__)

EXPERIMENT_ENV = "AIP_EXPERIMENT_NAME"
RUN_ENV = "AIP_EXPERIMENT_RUN_NAME"
CONTEXTS = "/metadataStores/default/contexts/"


def parse_names(environ: Mapping[str, str]) -> tuple[str, str, str, str] | None:
    """(project, location, experiment, run) from the environment; None: not tracked."""
    experiment, run = environ.get(EXPERIMENT_ENV, ""), environ.get(RUN_ENV, "")
    if not experiment or not run:
        return None
    project, location = environ.get("CLOUD_ML_PROJECT_ID", ""), environ.get("CLOUD_ML_REGION", "")
    if CONTEXTS in experiment:  # projects/P/locations/L/metadataStores/default/contexts/E
        parent, _, experiment = experiment.partition(CONTEXTS)
        _, project, _, location = parent.split("/")[:4]
    run = run.rpartition("/")[2]  # a full resource name ends in <experiment>-<run>
    run = run.removeprefix(f"{experiment}-") if run != experiment else run
    return project, location, experiment, run


def params_of(args: argparse.Namespace | Any) -> dict[str, float | int | str]:
    """The flags (a namespace, or a ``Flags`` dataclass of sections) as Experiment params:
    numbers stay numbers, anything else is its text."""
    if dataclasses.is_dataclass(args):  # each section's fields, by flag name
        values = {k: v for part in dataclasses.asdict(args).values() for k, v in part.items()}
    else:
        values = vars(args)
    params: dict[str, float | int | str] = {}
    for name, value in sorted(values.items()):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            params[name] = value
        else:
            params[name] = "" if value is None else str(value)
    return params


class Tracker:
    """Logs to one Experiment run; every method is a no-op once ``enabled`` is False."""

    def __init__(self, project: str, location: str, experiment: str, run: str):
        self.project, self.location = project, location
        self.experiment, self.run = experiment, run
        self.enabled = True
        self.time_series = False  # the experiment has a backing TensorBoard: curves too
        self._aiplatform = None

    def start(self, params: Mapping[str, float | int | str]) -> None:
        """Open (or, after a restart, resume) the run and log the flags as params."""
        self._call("start", lambda: self._start(params))

    def log_evaluation(self, metrics: Mapping[str, float], step: int) -> None:
        """One evaluation: the run's metrics become these (with ``step``), and a time series
        point per metric when the experiment has a backing TensorBoard."""
        values = _finite(metrics)
        if not self.enabled or not values:
            return
        self._call(
            "log_metrics", lambda: self._aiplatform.log_metrics({**values, "step": int(step)})
        )
        if self.enabled and self.time_series:  # a TensorBoard problem stops the curves only
            self.time_series = self._call(
                "log_time_series_metrics",
                lambda: self._aiplatform.log_time_series_metrics(values, step=int(step)),
                keep=True,
            )

    def finish(self, metrics: Mapping[str, float]) -> None:
        """The exported model's metrics, as ``final_<name>``; the run ends COMPLETE."""
        values = {f"final_{name}": value for name, value in _finite(metrics).items()}

        def end() -> None:
            values.update(ledger.figures())  # what the job's VM-time bought so far

            self._aiplatform.log_metrics(values)
            self._aiplatform.end_run()

        self._call("end_run", end)
        if self.enabled:
            logger.info("Experiment run %s/%s: logged %s", self.experiment, self.run, values)

    def _start(self, params: Mapping[str, float | int | str]) -> None:
        # google-api-core warns, per generated module, about Python versions it will drop; on
        # Vertex each stderr line is an error in Cloud Logging.
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.api_core\..*")
        from google.api_core import exceptions
        from google.cloud import aiplatform  # heavy: only once an experiment is set

        # The SDK would read AIP_EXPERIMENT_* itself inside init(), before it has the project
        # (2.7.0: initializer.init -> experiment_name), and fail without default credentials.
        hidden = {
            name: os.environ.pop(name) for name in (EXPERIMENT_ENV, RUN_ENV) if name in os.environ
        }
        try:
            aiplatform.init(
                project=self.project,
                location=self.location,
                experiment=self.experiment,
                experiment_tensorboard=False,  # never create a (billed) default TensorBoard
            )
        finally:
            os.environ.update(hidden)
        self._aiplatform = aiplatform
        try:
            aiplatform.start_run(self.run, resume=True)  # made by submit, or a restart
        except exceptions.NotFound:  # a job submitted without vertex-tools: make it
            aiplatform.start_run(self.run)
        experiment = aiplatform.Experiment(self.experiment)
        self.time_series = bool(experiment.backing_tensorboard_resource_name)
        aiplatform.log_params(dict(params))
        logger.info(
            "Tracking this run in Vertex AI Experiment run %s/%s", self.experiment, self.run
        )

    def _call(self, what: str, action: Callable[[], None], keep: bool = False) -> bool:
        """Run ``action``; a failure is one warning line and ends tracking (``keep``: only
        ``action``'s kind, the caller's business)."""
        if not self.enabled:
            return False
        try:
            action()
            return True
        except Exception as error:  # noqa: BLE001 (the API must never cost the training)
            self.enabled = keep
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            logger.warning(
                "Vertex AI Experiments: %s failed, not %s any further: %s",
                what,
                f"calling {what}" if keep else "tracking this run",
                first[:300],
            )
            return False


class NoTracker(Tracker):
    """Tracks nothing: no experiment, a worker, a tuning trial; the default of the hooks."""

    def __init__(self):
        super().__init__("", "", "", "")
        self.enabled = False


def start(
    args: argparse.Namespace | Any, is_chief: bool, trial: str | None = None, environ=None
) -> Tracker:
    """The chief's tracker, already logging the flags; a no-op tracker anywhere else."""
    environ = os.environ if environ is None else environ
    names = parse_names(environ)
    if names is None or not is_chief:
        return NoTracker()
    if trial is not None:  # Vertex gives a tuning trial no run; make tune-local gives one
        logger.info("Tuning trial %s: tracked in the run its study named", trial)
    project, location, experiment, run = names
    if not project or not location:
        logger.warning(
            "Vertex AI Experiments: %s has no project and region (a full resource name, or "
            "CLOUD_ML_PROJECT_ID and CLOUD_ML_REGION): not tracking",
            EXPERIMENT_ENV,
        )
        return NoTracker()
    tracker = Tracker(project, location, experiment, run)
    tracker.start(params_of(args))
    return tracker


def _finite(metrics: Mapping[str, float]) -> dict[str, float]:
    values = {}
    for name, value in metrics.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            values[name] = number
    return values
