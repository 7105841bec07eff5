"""The runtime of a cookiecutter-vertex-trainer project's trainer.

Versioned with vertex-trainer-tools (the same version): the tools write what this package reads.
"""

__version__ = "0.1.0"
