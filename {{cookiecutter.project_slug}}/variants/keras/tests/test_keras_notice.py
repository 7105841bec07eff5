"""The preemption drills for Keras: a Spot preemption costs at most one step, at any moment.

Each drill runs the job through the local emulator (the tools' pytest fixtures), on 2 tasks
under MultiWorkerMirroredStrategy, steps slowed to seconds where step time matters
(``VERTEX_TRAINER_DRILL_STEP_SECONDS``, read by the tools' drill hooks), prints how long after
the SIGTERM (or the kill) the replicas exited, and fails if a step is lost. This file's own
test-only hooks (evaluation slowed, the worker killed between the two tasks' publishes) are
loaded into every replica as ``sitecustomize``, after the drills' hooks.
(The chief SIGKILLed with restart_job_on_worker_restart: test_keras_local_run.py.)
"""

from __future__ import annotations

import re

import pytest
from conftest import TINY, final_step, notice_steps, resumed_at
from vertex_trainer_runtime.keras import checkpoint_callback

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

GRACE = 30.0
CHIEF, WORKER = "workerpool0-0", "workerpool1-0"

HOOKS = '''
"""Test hooks of test_keras_notice.py for the replicas (not the runner, which has no
CLUSTER_SPEC); each acts only when its environment variable is set."""
import os

if os.environ.get("CLUSTER_SPEC") and any(k.startswith("DRILL_") for k in os.environ):
    import signal
    import threading
    import time

    from vertex_trainer_runtime.keras import quiet  # noqa: F401  (as the trainer imports it)
    from vertex_trainer_runtime import preemption
    from vertex_trainer_runtime.keras import task_parts
    from trainer import model

    EVAL_SECONDS = float(os.environ.get("DRILL_EVAL_SECONDS") or 0)
    KILL_WORKER_AT_STEP = int(os.environ.get("DRILL_KILL_WORKER_PART_AT_STEP") or 0)
    ONCE = os.environ.get("DRILL_ONCE_FILE", "")

    def first_time() -> bool:
        """True once per job (the rerun does not do it again)."""
        if os.path.exists(ONCE):
            return False
        open(ONCE, "w").close()
        return True

    if EVAL_SECONDS:
        _evaluator = model.evaluator

        def _slow_evaluator(classifier):
            evaluate = _evaluator(classifier)

            def slow(dataset, stop=None):
                if first_time():  # an evaluation of many batches
                    for _ in range(int(EVAL_SECONDS * 10)):
                        if stop is not None and stop():
                            return None
                        time.sleep(0.1)
                return evaluate(dataset, stop)

            return slow

        model.evaluator = _slow_evaluator

    if KILL_WORKER_AT_STEP:
        _publish_once = task_parts.TaskPublisher.publish_once

        def _killed_between_publishes(self, source, step, metadata):
            if step == KILL_WORKER_AT_STEP and not self.tasks.is_chief and first_time():
                chief = os.path.join(self.root, f"checkpoint-{step}", "chief-0", "COMPLETE")
                while not os.path.exists(chief):
                    time.sleep(0.05)
                said = f"drill hook: chief-0 published step {step}: SIGKILL to the worker"
                print(said, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return _publish_once(self, source, step, metadata)

        task_parts.TaskPublisher.publish_once = _killed_between_publishes

    if os.environ.get("DRILL_SIGTERM_TWICE"):
        _handle = preemption.Notice.handle

        def _twice(self, signum=None, frame=None):
            _handle(self, signum, frame)
            if self.signals == 1:  # Compute Engine may repeat it: a second one, 0.5 s later
                threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()

        preemption.Notice.handle = _twice
'''


def args(epochs: int, steps: int) -> list[str]:
    return [*TINY, "--batch-size=8", f"--epochs={epochs}", f"--steps-per-epoch={steps}"]


def notice_drill(local_job, output_dir, trainer_args, env, replica=CHIEF):
    """The job with the drill's SIGTERM to ``replica`` once a checkpoint is complete; SIGKILL
    30 s later (Compute Engine's grace). The job must succeed."""
    drill = ["--kill-after=checkpoint", f"--kill-replica={replica}", "--kill-signal=TERM"]
    drill.append(f"--kill-grace={GRACE:g}")
    job = local_job(output_dir, trainer_args, replicas=2, runner_args=drill, env=env)
    assert job.returncode == 0, job.tail()
    assert f"kill drill: SIGTERM to {replica}" in job.output, job.tail()
    assert not re.search(r"kill drill: \S+ still running", job.output), job.tail()
    return job


def test_notice_in_a_5s_step_is_acted_on_at_its_end_twice_sent_and_loses_no_step(
    tmp_path, kill_and_resume, sitecustomize
):
    # 5 s steps, one per epoch; SIGTERM (twice, 0.5 s apart) to the worker once step 1 is saved:
    # it lands in step 2, whose end both tasks agree on. The rerun only evaluates and exports.
    step_seconds, epochs, steps = 5, 2, 1
    job = kill_and_resume(
        tmp_path / "out",
        args(epochs, steps),
        after="checkpoint",
        replica=WORKER,
        signal="TERM",
        env=sitecustomize(
            HOOKS, VERTEX_TRAINER_DRILL_STEP_SECONDS=str(step_seconds), DRILL_SIGTERM_TWICE="1"
        ),
    )
    _, seconds = job.sigterm_to_exit(WORKER, step_seconds + 10)
    assert re.search(rf"^{WORKER} \| .*SIGTERM to this replica, 2 signal\(s\)", job.output, re.M)
    # Both tasks saved step 2, the step in progress at the notice, then exited.
    assert notice_steps(job) == {CHIEF: 2, WORKER: 2}, job.tail()
    assert resumed_at(job)[0] == 2  # not one step lost
    assert "All 2 epochs are done: evaluating and exporting only" in job.output
    assert final_step(job.output_dir) == epochs * steps


def test_notice_during_a_long_evaluation_stops_it_and_saves_the_next_agreed_step(
    tmp_path, local_job, sitecustomize
):
    # SIGTERM to the chief while it evaluates epoch 1 for 20 s (its checkpoint saved first): the
    # evaluation stops, both tasks save the next step they agree on, and exit.
    # 12 steps per epoch: at least one agreement (every 10th batch at the latest) in epoch 2.
    epochs, steps = 2, 12
    env = sitecustomize(HOOKS, DRILL_EVAL_SECONDS="20", DRILL_ONCE_FILE=str(tmp_path / "once"))
    job = notice_drill(local_job, tmp_path / "out", args(epochs, steps), env)
    job.sigterm_to_exit(CHIEF, 10)
    assert job.exited_after_drill(WORKER) < GRACE, job.tail()
    assert "Preemption notice during the evaluation of epoch 1: evaluation stopped" in job.output
    # Both saved the same step after epoch 1's (the next agreement: within about a second of
    # training), and the rerun resumed from it on both: no step lost.
    saved = notice_steps(job)
    assert set(saved) == {CHIEF, WORKER} and len(set(saved.values())) == 1, job.tail()
    assert steps < saved[CHIEF] <= steps + checkpoint_callback.AGREE_EVERY_BATCHES < epochs * steps
    assert resumed_at(job)[0] == resumed_at(job, WORKER)[0] == saved[CHIEF]
    assert final_step(job.output_dir) == epochs * steps


@pytest.mark.parametrize("eval_seconds, exit_code", [(2, 0), (40, 143)], ids=["fits", "too-long"])
def test_notice_after_the_last_step_evaluates_and_exports_or_the_rerun_only_exports(
    tmp_path, local_job, sitecustomize, eval_seconds, exit_code
):
    # SIGTERM once the final checkpoint is saved, during the last evaluation: it is not cut
    # short. Within the grace (2 s) the export follows and the job ends at once, with no rerun;
    # longer than the grace (40 s), 25 s after SIGTERM the watchdog ends the chief (143) with the
    # final checkpoint complete, and the rerun trains no step.
    epochs, steps = 1, 2
    once = str(tmp_path / "once")
    env = sitecustomize(HOOKS, DRILL_EVAL_SECONDS=str(eval_seconds), DRILL_ONCE_FILE=once)
    job = notice_drill(local_job, tmp_path / "out", args(epochs, steps), env)
    assert job.sigterm_to_exit(CHIEF, GRACE)[0] == exit_code
    if exit_code == 0:
        assert "Preemption notice after the last step" in job.output
        assert job.attempts(CHIEF) == 1
    else:
        assert "Still running 25 s after SIGTERM" in job.output
        assert job.attempts(CHIEF) == 2 and resumed_at(job)[0] == epochs * steps
        assert "All 1 epochs are done: evaluating and exporting only" in job.output
    assert (job.output_dir / "model" / "saved_model.pb").is_file()
    assert final_step(job.output_dir) == epochs * steps


def test_kill_between_the_two_tasks_publishes_resumes_from_the_previous_complete_step(
    tmp_path, local_job, sitecustomize
):
    # The worker dies after the chief published its part of step 8 and before it published its
    # own: step 8 never gets its marker, the rerun resumes from step 4 on both tasks, not 0.
    epochs, steps = 2, 4
    once, step = str(tmp_path / "once"), str(epochs * steps)
    env = sitecustomize(HOOKS, DRILL_KILL_WORKER_PART_AT_STEP=step, DRILL_ONCE_FILE=once)
    job = local_job(tmp_path / "out", args(epochs, steps), replicas=2, env=env)
    assert job.returncode == 0, job.tail()
    assert "drill hook: chief-0 published step 8: SIGKILL to the worker" in job.output
    assert resumed_at(job)[0] == steps and resumed_at(job, WORKER)[0] == steps, job.tail()
    assert final_step(job.output_dir) == epochs * steps
