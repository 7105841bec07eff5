"""``softmax`` and ``expit``, which XGBoost's scikit-learn module imports, in NumPy."""

import numpy as np


def softmax(x, axis=None):
    shifted = np.asarray(x, dtype=float) - np.max(x, axis=axis, keepdims=True)
    exponent = np.exp(shifted)
    return exponent / np.sum(exponent, axis=axis, keepdims=True)


def expit(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))
