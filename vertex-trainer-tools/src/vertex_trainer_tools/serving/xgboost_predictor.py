"""Run by the xgboost 2.1 environment of ``envs.py``: ``python xgboost_predictor.py MODEL_BST``.

Reads the request JSON on stdin and prints ``{"predictions": [...]}``, doing what the XGBoost
prediction containers do (Vertex's prebuilt image and the SDK's own XGBoost predictor): load
``model.bst`` into a ``Booster``, turn the instances (lists of feature values, in the training
column order) into a ``DMatrix`` and return ``booster.predict(...)`` as a list. Only the
standard library, numpy and xgboost: nothing of the tools is importable here.
"""

import json
import sys

import numpy as np
import xgboost as xgb


def main(model_file: str) -> int:
    body = json.load(sys.stdin)
    try:
        booster = xgb.Booster(model_file=model_file)
    except Exception as error:  # noqa: BLE001 - XGBoostError, or one decoding a binary file's
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        print(f"not a model XGBoost can load ({first}): export it again", file=sys.stderr)
        return 2
    try:
        rows = np.asarray(body["instances"], dtype=np.float32)
    except (ValueError, TypeError, OverflowError) as error:
        print(f"instances: not a table of numbers: {error}", file=sys.stderr)
        return 2
    if rows.ndim != 2 or rows.shape[1] != booster.num_features():
        print(
            f"instances: {booster.num_features()} numbers per instance expected, got shape "
            f"{list(rows.shape)}",
            file=sys.stderr,
        )
        return 2
    predictions = booster.predict(xgb.DMatrix(rows))
    json.dump({"predictions": predictions.tolist(), "xgboost": xgb.__version__}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
