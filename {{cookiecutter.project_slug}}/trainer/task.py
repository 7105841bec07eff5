"""The entry point: ``python -m trainer.task [flags]``, locally, in the container and on Vertex.

The flags come from ``trainer.flags`` (the shared ones of ``trainer.cli`` and the framework's),
the training loop from ``trainer.train``, called as ``train.run(args, ctx)`` (the contract:
``trainer.context``).
Vertex appends hyperparameter-tuning trial values as ``--name=value``.
"""

from __future__ import annotations

import logging
import sys

from trainer import cli, context, flags, train


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    args = cli.parse_args(flags.parser(), argv)
    try:
        return train.run(args, context.build(args)) or 0
    except cli.InputError as error:
        # Bad input: one clear line, non-zero exit, nothing half-written to the model dir.
        print(f"ERROR: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
