"""Tools for a Vertex AI training project: config checks, submission, images, a local emulator.

They run on your machine (or in CI), never in the training container; the project's own
``trainer/`` package is what runs on Vertex. ``vertex-tools --help`` lists the commands.
"""

__version__ = "0.1.0"
