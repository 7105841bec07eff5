"""Offline fixtures: a tiny BERT built here and generated CSV data.

No Hub downloads: the tokenizer's WordPiece vocabulary is trained on generated text and the
model (2 layers, hidden size 32) is randomly initialised, then both are written with
``save_pretrained`` and loaded back through the same ``--model-name-or-path`` path users take.
"""

from __future__ import annotations

import ast
import csv
import os
import random
import subprocess
from pathlib import Path

import pytest
from vertex_trainer_tools import trainer_runs
from vertex_trainer_tools.testing import is_vertex_variable

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_SEQ_LENGTH = 64
TORCHRUN_VARIABLES = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

# Keep every run offline and small: no Hub, no telemetry, few threads per process.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Each test gets its own caches and tuning metrics file, and no Vertex variables from the
    calling shell."""
    for name in list(os.environ):
        if is_vertex_variable(name) or name in TORCHRUN_VARIABLES:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(tmp_path / "hypertune" / "metrics.json"))


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> str:
    """A save_pretrained folder: a 2-layer BERT, hidden size 32, WordPiece vocab of ~300."""
    from trainer import data, model

    folder = str(tmp_path_factory.mktemp("tiny-bert"))
    texts = data.synthetic_examples(400, seed=7)["text"]
    return model.build_scratch(
        texts, folder, hidden_size=32, layers=2, vocab_size=300, max_length=2 * MAX_SEQ_LENGTH
    )


# A training run of a few seconds on built-in data and the offline scratch model, no file of this
# machine, so it also runs in the image (tests/test_hpt_contract.py, tests/test_docker_image.py).
SMOKE_ARGS = [
    "--model-name-or-path=scratch",
    "--train-data=synthetic",
    "--eval-data=synthetic",
    "--max-train-samples=64",
    "--max-eval-samples=32",
    "--max-steps=4",
    f"--max-seq-length={MAX_SEQ_LENGTH}",
]


def smoke_args(tiny_bert: str) -> list[str]:
    """SMOKE_ARGS on the tiny BERT of ``tiny_bert``: a pretrained model loaded from a folder."""
    return [f"--model-name-or-path={tiny_bert}", *SMOKE_ARGS[1:]]


def printed_losses(output: str) -> list[float]:
    """The losses in the dicts the Trainer prints (transformers 5 prints numbers as text)."""
    logs = [ast.literal_eval(line) for line in output.splitlines() if line.startswith("{'loss'")]
    return [float(entry["loss"]) for entry in logs]


def write_csv(path, rows: dict[str, list]) -> str:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([list(rows), *zip(*rows.values(), strict=True)])
    return str(path)


def reviews(count: int, seed: int, contradicted: bool = False) -> dict[str, list]:
    """Short reviews with three sentiment words each: the tiny BERT learns them in a few epochs.

    ``contradicted``: each is followed by a long tail with three words of the other sentiment;
    truncated to 24 tokens a model sees only the review, untruncated also the tail."""
    from trainer.data import NEGATIVE_WORDS, POSITIVE_WORDS

    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(count):
        positive = rng.random() < 0.5
        words = (POSITIVE_WORDS, NEGATIVE_WORDS)
        cues, other = words if positive else reversed(words)
        if contradicted:
            fillers = rng.randint(4, 10), rng.randint(30, 50)
            text = f"{_cued(rng, cues, fillers[0])}. {_cued(rng, other, fillers[1])}"
        else:
            text = _cued(rng, cues, rng.randint(4, 16))
        texts.append(text.capitalize() + ".")
        labels.append("positive" if positive else "negative")
    return {"review": texts, "sentiment": labels}


def _cued(rng: random.Random, cues: list[str], fillers: int) -> str:
    """``fillers`` filler words with three of ``cues`` at random places."""
    from trainer import data

    words = [rng.choice(data.FILLER_WORDS) for _ in range(fillers)]
    for _ in range(3):
        words.insert(rng.randrange(len(words) + 1), rng.choice(cues))
    return " ".join(words)


@pytest.fixture(scope="session")
def csv_data(tmp_path_factory) -> dict[str, str]:
    """Generated reviews with string labels (negative/positive), 256 to train, 64 to evaluate."""
    folder = tmp_path_factory.mktemp("data")
    return {
        "train": write_csv(folder / "train.csv", reviews(256, seed=1)),
        "eval": write_csv(folder / "eval.csv", reviews(64, seed=2)),
    }


def base_args(tiny_bert: str, csv_data: dict, job_dir) -> list[str]:
    """Flags for a seconds-long run on the tiny model; Vertex-style underscores on purpose."""
    return [
        f"--model_name_or_path={tiny_bert}",
        f"--train-data={csv_data['train']}",
        f"--eval-data={csv_data['eval']}",
        "--text-column=review",
        "--label_column=sentiment",
        f"--max-seq-length={MAX_SEQ_LENGTH}",
        "--batch_size=16.0",
        "--learning_rate=0.003",
        "--logging-steps=1",
        f"--job-dir={job_dir}",
    ]


def trainer_env(**extra) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = PROJECT + os.pathsep + env.get("PYTHONPATH", "")
    return {**env, **extra}


def start(argv: list[str], log_path, **env) -> subprocess.Popen:
    """``python -m trainer.task argv`` in its own process group, output to ``log_path``."""
    return trainer_runs.start_trainer(argv, trainer_env(**env), log_path, Path(PROJECT))


def wait(process: subprocess.Popen, timeout: float) -> int:
    """The exit code; a process still running after ``timeout`` s is killed, the test failed."""
    return trainer_runs.wait_all([process], timeout)[0]
