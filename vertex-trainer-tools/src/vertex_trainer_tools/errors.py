"""The one error of the tools: the lines to print and the exit code, raised anywhere and
printed once, by ``vertex-tools``' ``main`` (``cli.py``), as one ``ERROR: <line>`` each.

The exit code says whose move it is, as argparse and most command lines do:

- ``USAGE`` (2): what the command was given is wrong (a flag, ``vertex.yaml``, a file or folder
  it reads, a value still a placeholder), found before anything was done; fix it and rerun.
- ``FAILED`` (1): what it was given is fine but something outside failed or refused: Google
  Cloud (credentials, a bucket, the image, the API), docker, gcloud, debootstrap, or the job.
"""

from __future__ import annotations

USAGE = 2
FAILED = 1


class ToolError(Exception):
    """A refusal or a failure: ``lines`` (one problem each) and the ``exit_code`` to end with."""

    def __init__(self, *lines: str, exit_code: int = USAGE):
        self.lines = list(lines)
        self.exit_code = exit_code
        super().__init__("\n".join(self.lines))
