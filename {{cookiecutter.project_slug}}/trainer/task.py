"""The entry point: ``python -m trainer.task [flags]``, locally, in the container and on Vertex.

YOURS TO CHANGE: nothing here, normally; what the trainer is (its flags, metric, functions) is
``trainer/spec.py``. This hands that declaration to the runtime, which parses the flags, builds
the run context and calls the declared ``run(flags, ctx)`` (``vertex_trainer_runtime.task``).
Vertex appends hyperparameter-tuning trial values as ``--name=value``. Exit codes: 0 done,
2 bad input, ``vertex_trainer_runtime.preemption.EXIT_CODE`` (143) saved on a preemption
notice, else a crash.
"""

from __future__ import annotations

from vertex_trainer_runtime import task

from trainer.spec import SPEC


def main(argv: list[str] | None = None) -> int:
    return task.main(SPEC, argv)


if __name__ == "__main__":
    # Closes the job ledger, then exits; at once after a preemption or a late notice (the
    # interpreter's teardown can hang on a collective, or outlast the VM's grace).
    task.finish(main())
