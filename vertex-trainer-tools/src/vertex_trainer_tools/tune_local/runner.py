"""Run a study's trials as Vertex runs them: each a local job, in parallel, until the budget.

Each trial is ``vertex-tools local-run --output-dir <study>/trials/<id> --hpt-trial <id>``
with its values fixed (``--hp``): the emulator's job, with the trial's ``<id>/`` folders and
``--<id>=<value>`` flags appended as Vertex appends them. The study reads the chief's hypertune
output every second, keeps each report in the journal, stops a trial the median rule condemns
(SIGTERM, as Vertex cancels it: the trainer checkpoints and exits), and counts failures.
Parallel trials each get an equal share of the CPUs, as each would get VMs of its own.
"""

from __future__ import annotations

import ctypes
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from vertex_trainer_tools.local_run import record
from vertex_trainer_tools.local_run.launcher import cpu_slices
from vertex_trainer_tools.tune_local import measurements
from vertex_trainer_tools.tune_local.journal import Journal, Trial
from vertex_trainer_tools.tune_local.space import Suggester

POLL_SECONDS = 0.5
# max_failed_trial_count 0 means "Vertex decides" (undocumented): a local study then stops at
# this many failed trials.
DEFAULT_MAX_FAILED = 3
INTERRUPTED = "interrupted"
PR_SET_PDEATHSIG = 1


@dataclass
class Settings:
    config: str  # vertex.yaml
    module: str  # the module each replica runs (trainer.task)
    trainer_args: list[str]  # after job.args, before the trial's flags
    trials: int  # the budget: max_trial_count, or TRIALS
    parallel: int  # parallel_trial_count, or PARALLEL
    seed: int = 0
    trial_env: Callable[[int], dict[str, str]] | None = None  # a trial's own variables


@dataclass
class Running:
    trial: Trial
    process: subprocess.Popen
    slot: int
    started: float
    log: IO
    metrics: str
    stop_why: str = ""


@dataclass
class StudyRun:
    journal: Journal
    hpt: object  # study.HptConfig
    settings: Settings
    say: object = print
    running: dict[int, Running] = field(default_factory=dict)
    _signal: int | None = None

    @property
    def trials_folder(self) -> Path:
        return self.journal.folder / "trials"

    def max_failed(self) -> int:
        return self.hpt.max_failed_trial_count or DEFAULT_MAX_FAILED

    def run(self) -> tuple[int, str]:
        """Run until the budget is spent: (exit status, why the study ended early or '')."""
        previous = {
            signum: signal.signal(signum, self._on_signal)
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        }
        suggester = Suggester(self.hpt, self.settings.seed)
        capacity = suggester.capacity()
        budget = self.settings.trials if capacity is None else min(self.settings.trials, capacity)
        unfinished = sorted(t.id for t in self.journal.trials.values() if t.state == "ACTIVE")
        slots = cpu_slices(self.settings.parallel)
        try:
            while True:
                if self._signal is not None:
                    self._stop_all(f"the study was {INTERRUPTED}")
                    return 128 + self._signal, INTERRUPTED
                self._poll()
                failed = self.journal.counts()["FAILED"]
                if failed >= self.max_failed():
                    self._stop_all("the study failed")
                    return 1, self._failed_line(failed)
                while len(self.running) < self.settings.parallel:
                    taken = {running.slot for running in self.running.values()}
                    slot = min(set(range(self.settings.parallel)) - taken)
                    if unfinished:
                        trial = self.journal.trials[unfinished.pop(0)]
                    elif len(self.journal.trials) < budget:
                        trial = self._new_trial(suggester)
                        if trial is None:
                            break
                    else:
                        break
                    self._start(trial, slot, slots[slot])
                if not self.running:
                    return 0, ""
                time.sleep(POLL_SECONDS)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _on_signal(self, signum, frame) -> None:
        self._signal = signum

    def _failed_line(self, failed: int) -> str:
        limit = self.hpt.max_failed_trial_count
        rule = (
            f"hpt.max_failed_trial_count is {limit}"
            if limit
            else f"hpt.max_failed_trial_count is 0 (Vertex decides): {DEFAULT_MAX_FAILED} here"
        )
        last = max(t.id for t in self.journal.trials.values() if t.state == "FAILED")
        trials = "trial" if failed == 1 else "trials"
        return (
            f"the study stopped after {failed} failed {trials}: {rule}; the last one's log: "
            f"{self.trials_folder / str(last) / 'log.txt'}"
        )

    def _new_trial(self, suggester: Suggester) -> Trial | None:
        number = max(self.journal.trials, default=0) + 1
        history = [t.summary() for t in self.journal.trials.values()]
        values = suggester.suggest(number, history)
        if values is None:
            return None
        self.journal.append({"event": "trial", "id": number, "values": values})
        return self.journal.trials[number]

    def command(self, trial: Trial) -> list[str]:
        folder = self.trials_folder / str(trial.id)
        command = [sys.executable, "-m", "vertex_trainer_tools", "local-run"]
        command += ["--config", self.settings.config, "--module", self.settings.module]
        command += ["--output-dir", str(folder), f"--hpt-trial={trial.id}"]
        command += [f"--hp={name}={value}" for name, value in trial.values.items()]
        return command + ["--", *self.settings.trainer_args]

    def _start(self, trial: Trial, slot: int, cpus: set[int] | None) -> None:
        folder = self.trials_folder / str(trial.id)
        folder.mkdir(parents=True, exist_ok=True)
        metrics = str(folder / str(trial.id) / "hypertune" / "workerpool0-0" / "output.metrics")
        try:
            done = record.read(folder)
        except ValueError:  # a damaged job record: the trial runs again and rewrites it
            done = None
        if done is not None and done.state == record.SUCCEEDED:
            # It ended while the study was being killed: its outputs are all there.
            self._end(trial, 0, measurements.read_reports(metrics, self.hpt.metric_id), 0.0)
            return
        flags = " ".join(f"--{name}={value}" for name, value in trial.values.items())
        again = " again (resumes from its checkpoints)" if record.path(folder).exists() else ""
        self.say(f"tune_local | trial {trial.id} starts{again}: {flags}")
        log = open(folder / "log.txt", "a", encoding="utf-8")
        env = dict(os.environ)
        if self.settings.trial_env is not None:  # its Experiment run, with job.experiment
            env.update(self.settings.trial_env(trial.id))
        if self.settings.parallel > 1:
            env.setdefault("OMP_WAIT_POLICY", "passive")  # spinning threads starve the other
        process = subprocess.Popen(
            self.command(trial),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # Ctrl-C reaches the study, which stops its trials itself
            preexec_fn=lambda: _trial_process(cpus),
        )
        self.running[trial.id] = Running(trial, process, slot, time.monotonic(), log, metrics)

    def _poll(self) -> None:
        completed = [
            t.measurements
            for t in self.journal.trials.values()
            if t.state in ("SUCCEEDED", "STOPPED")
        ]
        for running in list(self.running.values()):
            trial = running.trial
            exit_code = running.process.poll()
            reports = measurements.read_reports(running.metrics, self.hpt.metric_id)
            for report in measurements.newer(reports, trial.measurements):
                self.journal.append({"event": "report", "id": trial.id, **report})
            if exit_code is not None:
                del self.running[trial.id]
                running.log.close()
                self._end(trial, exit_code, [], time.monotonic() - running.started, running)
            elif (
                self.hpt.early_stopping == "median"
                and not running.stop_why
                and measurements.median_says_stop(trial.measurements, completed, self.hpt.goal)
            ):
                running.stop_why = self._stop_line(trial, completed)
                self.say(f"tune_local | trial {trial.id} stops early: {running.stop_why}")
                running.process.send_signal(signal.SIGTERM)

    def _stop_line(self, trial: Trial, completed) -> str:
        step = trial.measurements[-1]["step"]
        averages = [measurements.running_average(m, step) for m in completed]
        median = statistics.median(a for a in averages if a is not None)
        best = measurements.final(trial.measurements, "best", self.hpt.goal)
        return (
            f"its best {self.hpt.metric_id} {best:.6g} by step {step} is worse than the median "
            f"{median:.6g} of the completed trials (hpt.early_stopping: median)"
        )

    def _end(self, trial: Trial, exit_code: int, reports, seconds: float, running=None) -> None:
        for report in measurements.newer(reports, trial.measurements):
            self.journal.append({"event": "report", "id": trial.id, **report})
        final = measurements.final(
            trial.measurements, self.hpt.measurement_selection, self.hpt.goal
        )
        if running is not None and running.stop_why and final is not None:
            state, why = "STOPPED", running.stop_why
        elif exit_code != 0:
            state, why = "FAILED", f"local-run exited {exit_code}{_last_error(trial, self)}"
        elif final is None:
            state, why = "FAILED", f"it reported no {self.hpt.metric_id} (hypertune)"
        else:
            state, why = "SUCCEEDED", ""
        self.journal.append(
            {
                "event": "end",
                "id": trial.id,
                "state": state,
                "final": final,
                "why": why,
                "seconds": round(trial.seconds + seconds, 3),
            }
        )
        shown = f"{self.hpt.metric_id}={final:.6g}" if final is not None else why
        log = self.trials_folder / str(trial.id) / "log.txt"
        detail = f" ({why}; {log})" if state == "FAILED" and final is not None else ""
        where = f" ({log})" if state == "FAILED" and final is None else ""
        self.say(f"tune_local | trial {trial.id} {state}: {shown}{detail}{where}")

    def _stop_all(self, why: str) -> None:
        """Stop every running trial (its local-run stops its replicas) and wait for them; they
        stay unfinished in the journal, so that a resumed study runs them again."""
        for running in self.running.values():
            self.say(f"tune_local | trial {running.trial.id}: stopping it ({why})")
            running.process.send_signal(signal.SIGTERM)
        for running in self.running.values():
            running.process.wait()
            running.log.close()
            seconds = round(time.monotonic() - running.started, 3)
            self.journal.append({"event": "run", "id": running.trial.id, "seconds": seconds})
        self.running.clear()


def _last_error(trial: Trial, study: StudyRun) -> str:
    """``: <the trial's last ERROR line>`` from its log, or nothing."""
    try:
        with open(study.trials_folder / str(trial.id) / "log.txt", encoding="utf-8") as handle:
            lines = handle.read().splitlines()[-400:]
    except (OSError, ValueError):
        return ""
    errors = [line.strip() for line in lines if "ERROR" in line]
    return f": {errors[-1]}" if errors else ""


def _trial_process(cpus: set[int] | None) -> None:
    """In the trial's process before it runs: its CPUs, and its end when the study dies."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:  # a study killed with SIGKILL must not leave its trials training on
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
