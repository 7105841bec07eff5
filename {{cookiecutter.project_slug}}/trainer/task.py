"""The entry point: ``python -m trainer.task [flags]``, locally, in the container and on Vertex.

Common flags come from ``trainer.cli``; the framework's flags and training loop come from
``trainer.train``, called as ``train.run(args, ctx)`` (the contract: ``trainer.context``).
Vertex appends hyperparameter-tuning trial values as ``--name=value``.
"""

from __future__ import annotations

import logging
import sys

from trainer import cli, context, train


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    parser = cli.base_parser(train.DESCRIPTION)
    train.add_arguments(parser)
    args = cli.parse_args(parser, argv)
    try:
        return train.run(args, context.build(args)) or 0
    except cli.InputError as error:
        # Bad input: one clear line, non-zero exit, nothing half-written to the model dir.
        print(f"ERROR: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
