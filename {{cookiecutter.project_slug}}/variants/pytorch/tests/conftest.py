"""Offline fixtures: a tiny BERT built here and generated CSV data.

No Hub downloads: the tokenizer's WordPiece vocabulary is trained on generated text and the
model (2 layers, hidden size 32) is randomly initialised, then both are written with
``save_pretrained`` and loaded back through the same ``--model-name-or-path`` path users take.
"""

from __future__ import annotations

import csv
import os
import random
import subprocess
from pathlib import Path

import pytest
from vertex_trainer_tools import testing, trainer_runs
from vertex_trainer_tools.pytest_plugin import kill_drill
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


def isolate(patch: pytest.MonkeyPatch, folder) -> None:
    """Caches and the tuning metrics file in ``folder``; no Vertex variables of the shell."""
    for name in list(os.environ):
        if is_vertex_variable(name) or name in TORCHRUN_VARIABLES:
            patch.delenv(name, raising=False)
    patch.setenv("HF_DATASETS_CACHE", str(folder / "hf-datasets"))
    patch.setenv("CLOUD_ML_HP_METRIC_FILE", str(folder / "hypertune" / "metrics.json"))


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Each test gets its own caches and no Vertex variables from the calling shell; the
    module-scoped runs that several tests read call ``isolate`` on their own folder."""
    isolate(monkeypatch, tmp_path)


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


# The smoke run through the local emulator is read by two tests: its logs
# (test_pytorch_train.py) and its exported model served (test_pytorch_serving.py).
SMOKE_JOB = pytest.mark.xdist_group("pytorch-smoke-job")


@pytest.fixture(scope="session")
def smoke_job(tiny_bert, vertex_project, tmp_path_factory):
    """``local_job`` of ``smoke_args``: one replica, as ``make train-local`` runs it."""
    args = smoke_args(tiny_bert)
    return _emulated_job(tmp_path_factory.mktemp("smoke"), args, vertex_project)


def write_csv(path, rows: dict[str, list]) -> str:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([list(rows), *zip(*rows.values(), strict=True)])
    return str(path)


def reviews(count: int, seed: int) -> dict[str, list]:
    """Short reviews with three sentiment words each: the tiny BERT learns them in a few epochs."""
    from trainer import data

    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(count):
        positive = rng.random() < 0.5
        words = [rng.choice(data.FILLER_WORDS) for _ in range(rng.randint(4, 16))]
        for _ in range(3):
            cues = data.POSITIVE_WORDS if positive else data.NEGATIVE_WORDS
            words.insert(rng.randrange(len(words) + 1), rng.choice(cues))
        texts.append(" ".join(words).capitalize() + ".")
        labels.append("positive" if positive else "negative")
    return {"review": texts, "sentiment": labels}


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


# One SIGTERM drill on 2 replicas at real step times and the same job never stopped are read by
# several tests of test_pytorch_local_run.py. They run on one worker (``make test-all``'s
# ``--dist loadgroup``), so each job runs once.
TWO_REPLICA_JOBS = pytest.mark.xdist_group("pytorch-two-replica-jobs")
DRILL_STEPS = 5  # a checkpoint after every step; the notice comes in step 2 or 3
DRILL_STEP_SECONDS = "2.5"
GRACE = 30.0  # Compute Engine stops a preempted VM about 30 s after its SIGTERM


def drill_args(tiny_bert: str, csv_data: dict, *extra: str) -> list[str]:
    """Trainer flags of the local emulator's jobs: the tiny model, its data, no timed save."""
    args = [a for a in base_args(tiny_bert, csv_data, "") if not a.startswith("--job-dir")]
    return [*args, "--checkpoint-minutes=0", *extra]


def sigterm_drill_args(tiny_bert: str, csv_data: dict) -> list[str]:
    return drill_args(tiny_bert, csv_data, f"--max-steps={DRILL_STEPS}", "--save-steps=1")


def _emulated_job(folder, trainer_args, project, drill=None, **options):
    """``run_local_job`` (or ``kill_drill`` with the options of ``kill_and_resume``) of
    ``trainer_args`` in ``folder``, isolated as each test is."""
    with pytest.MonkeyPatch.context() as patch:
        isolate(patch, folder)
        if drill:
            return kill_drill(folder / "out", trainer_args, project=project, **options)
        flags = [f"--replicas={options.get('replicas', 1)}"]
        return testing.run_local_job(folder / "out", flags, trainer_args, 600, project=project)


@pytest.fixture(scope="session")
def sigterm_drill_2_replicas(tiny_bert, csv_data, vertex_project, tmp_path_factory):
    """SIGTERM to the chief once its first checkpoint is complete, at 2.5 s a step, then the
    whole job rerun: ``kill_and_resume(..., signal="TERM", restart_job=True)`` run once."""
    from vertex_trainer_runtime.preemption import DRILL_STEP_SECONDS_ENV

    return _emulated_job(
        tmp_path_factory.mktemp("sigterm-drill"),
        sigterm_drill_args(tiny_bert, csv_data),
        vertex_project,
        drill=True,
        restart_job=True,
        signal="TERM",
        grace=GRACE,
        env={DRILL_STEP_SECONDS_ENV: DRILL_STEP_SECONDS},
    )


@pytest.fixture(scope="session")
def uninterrupted_2_replicas(tiny_bert, csv_data, vertex_project, tmp_path_factory):
    """The SIGTERM drill's job on 2 replicas, never stopped."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    args = sigterm_drill_args(tiny_bert, csv_data)
    return _emulated_job(folder, args, vertex_project, replicas=2)
