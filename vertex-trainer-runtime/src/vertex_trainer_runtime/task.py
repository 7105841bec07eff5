"""What ``python -m trainer.task`` does with the trainer's declaration (``trainer/spec.py``).

:func:`main` parses the flags, builds the run context and calls the declared ``run(flags, ctx)``
(the contract: :mod:`vertex_trainer_runtime.context`); :func:`finish` ends the process. Exit
codes: 0 done, 2 bad input, :data:`preemption.EXIT_CODE` (143) saved on a preemption notice,
else a crash.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import NoReturn

from vertex_trainer_runtime import cli, context, ledger, preemption
from vertex_trainer_runtime.spec import TrainerSpec


def main(spec: TrainerSpec, argv: Sequence[str] | None = None) -> int:
    """Train as the flags say: the exit code (``sys.argv`` by default)."""
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    parsed = spec.parse(argv)
    run = spec.function("run")  # imports the framework
    try:
        return run(parsed, context.build(parsed, spec=spec)) or 0
    except cli.InputError as error:
        # Bad input: one clear line, non-zero exit, nothing half-written to the model dir.
        print(f"ERROR: {error}", file=sys.stderr)
        return ledger.BAD_INPUT
    except preemption.Preempted as stop:
        # Saved on a SIGTERM (a Spot preemption): non-zero, so Vertex reruns it from there.
        logging.getLogger(__name__).warning(stop.message())
        return preemption.EXIT_CODE


def finish(code: int) -> NoReturn:
    """End the process with ``code``, as a script's ``__main__`` block does after :func:`main`."""
    ledger.close(code)  # the job ledger's last record: how this attempt ended
    if code == preemption.EXIT_CODE:
        # Every replica stops after an agreed step, so a collective is left without its
        # shutdown handshake, and the interpreter's teardown can crash on it (XGBoost's
        # tracker): the checkpoint is written, so end the process now.
        preemption.exit_now(code)
    if code == 0 and preemption.noticed():
        # A notice after the last step, and the model is exported: exit 0 before the VM stops
        # rather than spend the grace in the interpreter's teardown (TensorFlow's took 9 s in
        # a one-CPU container).
        preemption.exit_now(0)
    sys.exit(code)
