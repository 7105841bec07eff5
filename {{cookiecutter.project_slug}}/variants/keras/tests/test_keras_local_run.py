"""The Keras job through the local emulator (the tools' pytest fixtures): 2 replicas under
MultiWorkerMirroredStrategy, and the preemption drills (the chief SIGKILLed after a checkpoint,
or sent SIGTERM: both tasks save the same next agreed batch; rerun from the start)."""

from __future__ import annotations

import os
import re

import pytest
import tensorflow as tf
from conftest import PROJECT, TINY, notice_steps, resumed_at
from vertex_trainer_runtime import checkpoints
from vertex_trainer_tools.pytest_plugin import run_readme_line
from vertex_trainer_tools.testing import is_vertex_variable, with_reduction_server

# One worker runs this module's tests (make test and test-all: --dist loadfile), so that the
# uninterrupted job below is run once for the tests that read it.
pytestmark = [pytest.mark.distributed, pytest.mark.slow]

# 501 examples, which no batch divides: a pass of the global batch of 16 is 32 steps, the last
# one partial (as Keras counts steps), and a run resumed inside it must still end as one never
# stopped.
EXAMPLES, EPOCHS = 501, 2
STEPS = -(-EXAMPLES // 16)
ARGS = [*TINY, f"--synthetic-examples={EXAMPLES}", "--batch-size=8", f"--epochs={EPOCHS}"]
TASKS = ("chief-0", "worker-0")  # MultiWorkerMirroredStrategy: each task's part of a step
REPLICAS_2 = "make train-local REPLICAS=2"
KILL_DRILL = "make train-local REPLICAS=2 KILL_AFTER=checkpoint"
SIGTERM_DRILL = "make train-local REPLICAS=2 KILL_AFTER=checkpoint KILL_SIGNAL=TERM"


def final_checkpoints(output_dir):
    """(step, epochs done) of each task's part of the newest complete checkpoint."""
    latest = checkpoints.latest_complete(str(output_dir / "checkpoints"))
    parts = [checkpoints.Checkpoint(latest.step, os.path.join(latest.path, t)) for t in TASKS]
    return [(part.step, part.metadata()["epochs_done"]) for part in parts]


def assert_chief_model(model_dir):
    loaded = tf.saved_model.load(str(model_dir))
    outputs = loaded.signatures["serving_default"](images=tf.zeros([2, 16, 16, 3]))
    assert outputs["probabilities"].shape == (2, 4)


# make test-all (--dist loadgroup): the tests that read the shared job run on one worker.
SHARES_THE_UNINTERRUPTED_JOB = pytest.mark.xdist_group("keras-uninterrupted-2-replica-job")


@pytest.fixture(scope="module")
def uninterrupted_job(tmp_path_factory):
    """The README's REPLICAS=2 job of ARGS, never stopped, in a vertex.yaml with a Reduction
    Server in pool 2 (its 2 replicas idle), with timed saves (which leave the weights alone):
    what the export and Reduction Server test checks and the SIGTERM drill's final weights must
    equal. Run once for the two (each trainer start costs seconds)."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    config = with_reduction_server(PROJECT / "vertex.yaml", folder / "vertex.yaml")
    with pytest.MonkeyPatch.context() as patch:
        for name in [name for name in os.environ if is_vertex_variable(name)]:
            patch.delenv(name)
        trainer_args = [*ARGS, "--checkpoint-minutes=0.00001"]  # a timed save at every agreement
        return run_readme_line(PROJECT, REPLICAS_2, folder / "out", trainer_args, config=config)


@SHARES_THE_UNINTERRUPTED_JOB
def test_two_replicas_train_only_the_chief_exports_and_the_reduction_server_is_left_out(
    uninterrupted_job,
):
    """Both tasks train under MultiWorkerMirroredStrategy and save the same steps, a part each;
    only the chief reports and keeps its export; the worker removes its scratch export."""
    job = uninterrupted_job
    print(f"keras REPLICAS=2 local run: {job.seconds:.1f} s")
    assert job.returncode == 0, job.tail()
    chief, worker = job.lines("workerpool0-0"), job.lines("workerpool1-0")
    # vertex.yaml with job.reduction_server: TF_CONFIG lists its 2 (idle) replicas as "ps"; the
    # strategy still has the 2 training replicas.
    setup = f"2 replica(s), global batch 16 (8 per replica), {STEPS} steps per epoch"
    assert any(f"MultiWorkerMirroredStrategy on chief 0: {setup}" in line for line in chief)
    assert any("MultiWorkerMirroredStrategy on worker 0: 2 replica(s)" in line for line in worker)
    assert any("Reduction Server: 2 replica(s)" in line for line in worker)
    assert any("idle" in line for line in job.lines("workerpool2-1"))

    # Only the chief reports and exports; the worker's scratch export went into its own TMPDIR.
    assert job.reported_steps("workerpool0-0") == list(range(1, EPOCHS + 1))
    assert not job.metrics_file("workerpool1-0").exists()
    assert_chief_model(job.output_dir / "model")
    scratch = [re.search(r"copy of the model to (\S+)", line) for line in worker]
    assert any(scratch), "the worker did not export its scratch copy"
    assert all(f"local_run-{job.job_id}-" in match.group(1) for match in scratch if match), (
        "the worker's scratch copy must go to its own TMPDIR, not the model dir"
    )
    assert final_checkpoints(job.output_dir) == [(EPOCHS * STEPS, EPOCHS)] * 2
    # One folder per step with a part per task, saved at the same steps: the timed saves the
    # tasks agree on every 10 steps (.., 50, 60) and the epoch ends (32, 64); the newest two kept.
    root = job.output_dir / "checkpoints"
    saved = checkpoints.list_checkpoints(str(root))
    assert [c.step for c in saved if not checkpoints.problem(c)] == [60, EPOCHS * STEPS]
    for part in TASKS:
        assert (root / f"checkpoint-{EPOCHS * STEPS}" / part / checkpoints.MARKER).is_file()


# Loaded into every replica: the markers of the first checkpoint (the one the drill waits for)
# take a second to write, as on a busy machine. The drill must still fire only once a marker is
# whole (a kill while it was half-written once made the rerun chief skip its checkpoint and
# train from scratch). Later markers are written at full speed: no claim is about them. Epoch 2
# takes a second, which a drill polling on a loaded machine once missed: the chief waits until
# that checkpoint is marked complete, then up to 20 s for the drill's kill.
SLOW_MARKERS = """
import json, os, threading, time
from vertex_trainer_runtime import publisher
_dump, _submit, _marked = json.dump, publisher.Publisher.submit, threading.Event()
_task = json.loads(os.environ.get("CLUSTER_SPEC") or "{}").get("task", {})
def _slow_dump(obj, handle, *args, **kwargs):
    name = getattr(handle, "name", "")
    if "COMPLETE" in name and "checkpoint-{STEPS}/" in name:
        time.sleep(1)
        if name.endswith("checkpoint-{STEPS}/COMPLETE.partial"):
            _marked.set()
    return _dump(obj, handle, *args, **kwargs)
def _submit_then_wait(self, source, step, *args, **kwargs):
    _submit(self, source, step, *args, **kwargs)
    if step == {STEPS} and _task.get("type") == "workerpool0":
        _marked.wait(60)
        print("drill hook: checkpoint-{STEPS} marked, waiting for the kill", flush=True)
        time.sleep(20)
json.dump, publisher.Publisher.submit = _slow_dump, _submit_then_wait
""".replace("{STEPS}", str(STEPS))


@pytest.mark.parametrize("restart_job", [None, True], ids=["chief-restarted", "restart-job"])
def test_kill_drill_resumes_from_the_newest_complete_checkpoint(
    tmp_path, kill_and_resume, sitecustomize, restart_job
):
    # Kill the chief once the first step is complete (end of epoch 1): once both tasks' parts
    # of it are published (it used to take two per-task markers). No replica outlives its job:
    # the worker, in a collective with a chief that is gone, exits within the 30 s grace, by
    # itself when the runner restarts only the chief, on the runner's SIGTERM with
    # restart_job_on_worker_restart.
    env = sitecustomize(SLOW_MARKERS)
    if restart_job:
        job = kill_and_resume(tmp_path / "out", ARGS, restart_job=True, env=env)
    else:
        job = run_readme_line(PROJECT, KILL_DRILL, tmp_path / "out", ARGS, env=env)
    assert "kill drill: SIGKILL to workerpool0-0 after checkpoint-" in job.output
    assert f"drill hook: checkpoint-{STEPS} marked, waiting for the kill" in job.output
    worker = job.exited_after_drill("workerpool1-0")
    print(f"keras kill drill ({restart_job=}): {job.seconds:.0f} s, worker out {worker:.1f} s")
    assert worker < 30, job.tail()

    # The rerun chief resumed from a complete checkpoint, not from scratch ...
    step, done = resumed_at(job)
    assert 1 <= done < EPOCHS and step == done * STEPS
    if restart_job:  # both from the checkpoint of the drill
        assert resumed_at(job, "workerpool1-0")[0] == step == STEPS
    # ... so it trained and reported only the epochs still missing,
    assert job.reported_steps("workerpool0-0") == list(range(done + 1, EPOCHS + 1))
    # and the final state equals an uninterrupted run's: same steps, same epochs.
    assert final_checkpoints(job.output_dir) == [(EPOCHS * STEPS, EPOCHS)] * 2
    assert_chief_model(job.output_dir / "model")


@SHARES_THE_UNINTERRUPTED_JOB
def test_sigterm_drill_saves_an_agreed_batch_and_ends_with_uninterrupted_weights(
    tmp_path, uninterrupted_job
):
    """SIGTERM to the chief once epoch 1's checkpoint is complete: both tasks save the same
    batch of epoch 2 and resume there, and the job ends with the weights of the job never
    stopped, bit for bit (the same batches in the same order, the partial last one included)."""
    from test_keras_data_order import _final_weights

    job = run_readme_line(PROJECT, SIGTERM_DRILL, tmp_path / "out", ARGS)
    print(f"keras REPLICAS=2 SIGTERM drill: {job.seconds:.1f} s")
    job.sigterm_to_exit()
    # Both tasks saved the same step (agreed within 10 batches of training), then exited.
    saved = notice_steps(job)
    assert len(saved) == 2 and len(set(saved.values())) == 1, job.tail()
    step = saved["workerpool0-0"]
    assert STEPS < step < EPOCHS * STEPS, job.tail()
    # Both reruns resumed inside epoch 2 at that step; the chief reported only epoch 2.
    resumed = f"(step {step}, 1 epochs done) and {step - STEPS} steps of epoch 2"
    for replica in ("workerpool0-0", "workerpool1-0"):
        assert resumed_at(job, replica)[0] == step
        assert any(resumed in line for line in job.lines(replica, attempt=2)), job.tail()
    assert job.reported_steps("workerpool0-0") == [EPOCHS]
    assert final_checkpoints(job.output_dir) == [(EPOCHS * STEPS, EPOCHS)] * 2
    whole = uninterrupted_job
    assert whole.returncode == 0, whole.tail()
    weights, expected = (
        _final_weights(d / "checkpoints", "chief-0") for d in (job.output_dir, whole.output_dir)
    )
    assert weights.keys() == expected.keys() and weights
    largest = max(float(abs(weights[k] - expected[k]).max()) for k in weights)
    assert largest == 0.0, f"max |dW| {largest:.3g}"
