"""The bare XGBoost baseline: pandas, ``DMatrix`` and ``xgb.train``, nothing else.

Same CSV and the same booster parameters as the generated trainer; no evaluation set, no
callbacks, no checkpoints, no metric reporting.
"""

from __future__ import annotations

import argparse

import pandas as pd
import xgboost as xgb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--train-data", required=True)
    parser.add_argument("--num-boost-round", type=int, required=True)
    parser.add_argument("--max-depth", type=int, required=True)
    parser.add_argument("--eta", type=float, required=True)
    parser.add_argument("--nthread", type=int, default=0, help="0: XGBoost's default, all cores")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--device", default="cpu", help="cuda: the GPU benchmark (gpu.py)")
    args = parser.parse_args()

    frame = pd.read_csv(args.train_data)
    train = xgb.DMatrix(frame.drop(columns=["label"]), label=frame["label"])
    params = {
        "objective": "binary:logistic",
        "tree_method": "hist",
        "max_depth": args.max_depth,
        "eta": args.eta,
        "seed": args.seed,
    }
    if args.nthread:
        params["nthread"] = args.nthread
    if args.device != "cpu":
        params["device"] = args.device
    xgb.train(params, train, num_boost_round=args.num_boost_round)


if __name__ == "__main__":
    main()
