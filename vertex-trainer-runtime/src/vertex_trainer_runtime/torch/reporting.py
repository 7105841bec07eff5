"""What a PyTorch run logs: the tuning metric to hyperparameter tuning, eval metrics to the
Experiment run, progress to the log, TensorBoard and the goodput.

:func:`report_final_model` makes the last value reported for tuning the exported model's.
"""

from __future__ import annotations

import logging

from transformers import Trainer, TrainerCallback

from vertex_trainer_runtime import cli, hptune, ledger, tracking
from vertex_trainer_runtime.context import OutputDir

logger = logging.getLogger(__name__)


class ReportMetric(TrainerCallback):
    """Reports eval accuracy with the global step to Vertex hyperparameter tuning, and each
    evaluation's metrics (not its speed) to the Experiment run."""

    def __init__(self, reporter: hptune.MetricReporter, tracker: tracking.Tracker | None = None):
        self.reporter = reporter
        self.tracker = tracker or tracking.NoTracker()
        self.last_step = None  # the step of this run's last report
        self.last_value = None

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        metrics = metrics or {}
        value = metrics.get(f"eval_{self.reporter.tag}")
        if value is not None:
            self.report(value, state.global_step)
        quality = {
            name.removeprefix("eval_"): number
            for name, number in metrics.items()
            if not name.endswith(("_runtime", "_per_second"))
        }
        self.tracker.log_evaluation(quality, state.global_step)
        return control

    def report(self, value: float, step: int) -> None:
        self.reporter.report(value, step)
        self.last_step, self.last_value = step, value


class LogProgress(TrainerCallback):
    """Logs where training starts and ends, so a resumed run shows what it skipped."""

    def __init__(self):
        self.first_step = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.first_step = state.global_step
        logger.info("Training from global step %d to %d", state.global_step, state.max_steps)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        logger.info(
            "Training finished at global step %d (%d steps in this run)",
            state.global_step,
            state.global_step - (self.first_step or 0),
        )
        return control


def tensorboard_callbacks(directory: OutputDir) -> list[TrainerCallback]:
    """TensorBoard's callback writing to ``directory``; none (one warning) where it cannot."""
    try:
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations import TensorBoardCallback

        path = directory.local()
    except (ImportError, cli.InputError) as error:
        logger.warning("No TensorBoard logs: %s", error)
        return []

    class KeepWriterOpen(TensorBoardCallback):
        """Hugging Face's callback closes its writer when training ends, and the final model's
        evaluation (``report_final_model``) that follows would open a new one in the scratch
        output folder: its metrics would miss the job's TensorBoard. Flushed here instead; the
        writer closes with the process."""

        def on_train_end(self, args, state, control, **kwargs):
            if self.tb_writer is not None:
                self.tb_writer.flush()

    return [KeepWriterOpen(tb_writer=SummaryWriter(log_dir=path))]


def write_goodput(directory: OutputDir, step: int) -> None:
    """The job's goodput so far (its ledger: ``make report`` says where the rest went) as
    ``goodput/*`` scalars at ``step``, like the Keras variant; nothing without a ledger."""
    figures = ledger.figures()
    if not figures:
        return
    try:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(log_dir=directory.local())
    except (ImportError, cli.InputError) as error:
        logger.warning("No goodput in TensorBoard: %s", error)
        return
    with writer:
        for name, value in figures.items():
            writer.add_scalar(f"goodput/{name}", value, step)


def report_final_model(trainer: Trainer, report: ReportMetric) -> None:
    """Make the last reported value the accuracy of the model that is exported.

    Vertex takes the last measurement of a trial (vertex.yaml: ``measurement_selection: last``).
    The decision uses the log history, the same on every rank, since evaluating is collective.
    """
    step = trainer.state.global_step
    key = f"eval_{report.reporter.tag}"
    values = [e[key] for e in trainer.state.log_history if key in e and e.get("step") == step]
    if not values:  # the last step was not an evaluation step: measure the final model
        trainer.evaluate()
    elif report.last_step != step:
        # Resumed from the final checkpoint (a restart before the export): the final model's
        # accuracy was measured, and reported, by the earlier attempt.
        report.report(values[-1], step)


def log_time_spent(summary: dict) -> None:
    """The attempt's time training, in checkpoints and in evaluations (``Throughput.summary``)."""
    logger.info(
        "Time spent: %.1f s training, %.1f s in %d checkpoints, %.1f s in %d evaluations",
        summary["training_seconds"],
        summary["checkpoint_seconds"],
        summary["checkpoints"],
        summary["evaluation_seconds"],
        summary["evaluations"],
    )
