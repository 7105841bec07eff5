"""The job ledger of a Keras job through the local emulator: a replica held at its start is the
other replica's wait for its peers in ``make report`` (MultiWorkerMirroredStrategy starts once
every task has joined), and the report totals the model FLOPs the chief counted once: its
training step's FLOPs per example x the global batch x the steps."""

from __future__ import annotations

import pytest
from conftest import TINY
from vertex_trainer_runtime import goodput
from vertex_trainer_runtime.keras import model_flops
from vertex_trainer_tools import report
from vertex_trainer_tools.pytest_plugin import first_attempts, hold_at_start, job_ledger

from trainer import flags, model

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

EXAMPLES, BATCH, EPOCHS = 64, 8, 2  # 4 steps of the global batch of 16 per epoch
ARGS = [*TINY, f"--synthetic-examples={EXAMPLES}", f"--batch-size={BATCH}", f"--epochs={EPOCHS}"]
HOLD_S = 12.0
# The worker replica waits this long at its start, before anything else runs in it.
HOLD = hold_at_start(HOLD_S)


def test_a_replica_held_at_its_start_is_the_other_ones_wait(tmp_path, local_job, sitecustomize):
    job = local_job(tmp_path / "job", ARGS, replicas=2, env=sitecustomize(HOLD))
    assert job.returncode == 0, job.tail()
    found = job_ledger(job)
    chief, worker = first_attempts(found, "workerpool0-0", "workerpool1-0")
    # The chief waited in the strategy's start for the held worker, which did not wait.
    assert chief.seconds["waiting"] > HOLD_S / 2 + worker.seconds["waiting"], chief.seconds
    assert worker.seconds["startup"] >= HOLD_S, "the held replica's own start-up"
    # Every task's VM is paid for: the worker's steps are its lane's productive time too.
    assert worker.seconds["productive"] > 0 and not worker.of("model_flops"), worker.seconds
    joined = [attempt.of("peer_wait")[0]["time"] for attempt in (chief, worker)]
    assert abs(joined[0] - joined[1]) < 2, joined

    # The chief's model FLOPs: the small CNN's count x 16 examples x every step trained.
    config = flags.Model(model="small-cnn", weights="none", image_size=16)
    per_example = model_flops.training_flops(model.build(config, 4, 16, 0.01))
    steps = EPOCHS * EXAMPLES // (2 * BATCH)
    assert sum(r["steps"] for r in chief.of("model_flops")) == steps
    assert chief.flops == pytest.approx(per_example * 2 * BATCH * steps, rel=1e-6)
    # Its convolutions and output layer alone, analytically: forward and backward are 3 x.
    products = 2 * (3 * 3 * 3 * 16 * 16 * 16 + 3 * 3 * 16 * 32 * 8 * 8 + 32 * 4)
    assert 3 * products <= per_example <= 1.05 * 3 * products
    text = "\n".join(report.lines(str(job.output_dir), found, goodput.summary(found)))
    assert f"Model FLOPs: {chief.flops:.3g}" in text, text
