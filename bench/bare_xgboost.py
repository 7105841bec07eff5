"""The bare XGBoost baseline: pandas, ``QuantileDMatrix`` and ``xgb.train``, nothing else.

Same CSV or Parquet file and the same booster parameters as the generated trainer; no
checkpoints, no metric reporting. With ``--eval-data``, the eval set's AUC every
``--eval-rounds`` rounds, as the trainer's default computes it for its reports (``eval_set``,
which reads XGBoost's prediction cache: only the new trees are predicted); with ``--evals``
too, the eval set is in ``xgb.train``'s ``evals`` instead, scored by XGBoost after every round,
the loop a user would write; without ``--eval-data``, no evaluation at all.
"""

from __future__ import annotations

import argparse

import pandas as pd
import xgboost as xgb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--train-data", required=True)
    parser.add_argument("--eval-data", default=None, help="AUC on it every --eval-rounds")
    parser.add_argument("--eval-rounds", type=int, default=10)
    parser.add_argument(
        "--evals", action="store_true", help="the eval set in evals: its AUC every round"
    )
    parser.add_argument("--num-boost-round", type=int, required=True)
    parser.add_argument("--max-depth", type=int, required=True)
    parser.add_argument("--eta", type=float, required=True)
    parser.add_argument("--nthread", type=int, default=0, help="0: XGBoost's default, all cores")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--base-score", default="auto", help="the trainer's default is 0.5 (auto: XGBoost's)"
    )
    parser.add_argument("--device", default="cpu", help="cuda: the GPU benchmark (gpu.py)")
    args = parser.parse_args()

    frame = read_table(args.train_data)
    # QuantileDMatrix, as the trainer: the features binned once, the eval set with its bins.
    train = xgb.QuantileDMatrix(frame.drop(columns=["label"]), label=frame["label"])
    params = {
        "objective": "binary:logistic",
        "tree_method": "hist",
        "max_depth": args.max_depth,
        "eta": args.eta,
        "seed": args.seed,
    }
    if args.base_score != "auto":
        params["base_score"] = float(args.base_score)
    if args.nthread:
        params["nthread"] = args.nthread
    if args.device != "cpu":
        params["device"] = args.device
    callbacks, evals = [], []
    if args.eval_data:
        frame = read_table(args.eval_data)
        evaluation = xgb.QuantileDMatrix(
            frame.drop(columns=["label"]), label=frame["label"], ref=train
        )
        params["eval_metric"] = "auc"
        if args.evals:
            evals = [(evaluation, "eval")]
        else:
            callbacks.append(EvalEvery(evaluation, args.eval_rounds))
    xgb.train(
        params,
        train,
        num_boost_round=args.num_boost_round,
        evals=evals,
        callbacks=callbacks,
        verbose_eval=False,
    )


def read_table(path: str) -> pd.DataFrame:
    """CSV (the CPU benchmark) or Parquet (the GPU benchmark's million rows), as the trainer."""
    return pd.read_parquet(path) if path.endswith(".parquet") else pd.read_csv(path)


class EvalEvery(xgb.callback.TrainingCallback):
    """The eval set's metric every ``rounds`` rounds, with XGBoost's own ``eval_set``."""

    def __init__(self, data: xgb.DMatrix, rounds: int):
        super().__init__()
        self.data, self.rounds = data, rounds

    def after_iteration(self, model, epoch, evals_log) -> bool:
        if (epoch + 1) % self.rounds == 0:
            print(model.eval_set([(self.data, "eval")], iteration=epoch))
        return False


if __name__ == "__main__":
    main()
