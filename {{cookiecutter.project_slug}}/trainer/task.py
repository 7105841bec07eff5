"""The entry point: ``python -m trainer.task [flags]``, locally, in the container and on Vertex.

The flags come from ``trainer.flags`` (a ``Flags`` dataclass of sections: the shared ones of
``vertex_trainer_runtime.cli`` and the framework's), the training loop from ``trainer.train``,
called as ``train.run(flags, ctx)`` (the contract: ``vertex_trainer_runtime.context``).
Vertex appends hyperparameter-tuning trial values as ``--name=value``. Exit codes: 0 done,
2 bad input, ``vertex_trainer_runtime.preemption.EXIT_CODE`` (143) saved on a preemption
notice, else a crash.
"""

from __future__ import annotations

import logging
import sys

from vertex_trainer_runtime import cli, context, ledger, preemption

from trainer import flags, train


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    parsed = cli.parse(flags.Flags, flags.DESCRIPTION, argv)
    try:
        return train.run(parsed, context.build(parsed)) or 0
    except cli.InputError as error:
        # Bad input: one clear line, non-zero exit, nothing half-written to the model dir.
        print(f"ERROR: {error}", file=sys.stderr)
        return 2
    except preemption.Preempted as stop:
        # Saved on a SIGTERM (a Spot preemption): non-zero, so Vertex reruns it from there.
        logging.getLogger(__name__).warning(stop.message())
        return preemption.EXIT_CODE


if __name__ == "__main__":
    code = main()
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
