"""A stand-in for SciPy, only for the GPU benchmark's XGBoost processes where SciPy is absent.

XGBoost imports ``scipy.sparse`` and ``scipy.special.softmax`` when it loads, but uses them
only for sparse inputs and scikit-learn models; the benchmark feeds dense pandas frames. SciPy's
wheel (about 35 MB) does not fit the 60 MiB of wheels an air-gapped GPU VM gets beside the
55 MiB CUDA build of XGBoost, so ``bench/gpu.py`` puts this folder on ``PYTHONPATH`` for the
XGBoost processes when the interpreter cannot import SciPy, and records that it did.
"""

__version__ = "0+bench-shim"
