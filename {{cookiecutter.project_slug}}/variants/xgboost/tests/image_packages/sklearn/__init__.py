"""Not scikit-learn: the trainer's processes in the tests import this one instead, and fail.

scikit-learn is in requirements-dev.txt only (the tests' bundled data sets and AUCs); the image
and a Vertex replica have none. XGBoost imports it whenever it is installed, which cost every
trainer start of the tests 1.6 s on an idle machine, over 10 s under load. ``conftest.py`` puts
this folder first on the ``PYTHONPATH`` of the trainers it starts, so they import what the
image has and XGBoost runs as it does there (without its scikit-learn estimators).
"""

raise ImportError("scikit-learn is a test-only dependency: the trainer runs without it")
