"""Real fine-tuning runs of the tiny BERT: metrics for tuning, export, prediction, bad input."""

from __future__ import annotations

import csv
import json
import logging
import os
import shutil

import pytest
import torch
from conftest import base_args, reviews, write_csv
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from vertex_trainer_runtime.torch import distributed
from vertex_trainer_tools.testing import read_metrics

from trainer import data, model, predict, task, train
from trainer.spec import SPEC


def test_scratch_model_on_synthetic_data_with_step_based_evaluation(tmp_path, caplog):
    """What `make train-local` runs: no download at all, the model is built from the texts.
    Its speed is logged each logging interval, and the time spent once at the end."""
    caplog.set_level(logging.INFO)  # the trainer's and the runtime's loggers
    argv = [
        "--model-name-or-path=scratch",
        "--train-data=synthetic",
        "--max-train-samples=64",
        "--max-eval-samples=32",
        "--max-steps=5",
        "--eval-steps=2",
        "--save-steps=2",
        "--logging-steps=2",
        "--batch-size=8",
        "--group-by-length",
        f"--job-dir={tmp_path / 'job'}",
    ]
    assert task.main(argv) == 0
    records = read_metrics(os.environ["CLOUD_ML_HP_METRIC_FILE"])
    # Evaluated at steps 2 and 4, and once more at the end because 5 is no evaluation step.
    assert [int(r["global_step"]) for r in records] == [2, 4, 5]
    model_dir = tmp_path / "job" / "model"
    config = json.loads((model_dir / "config.json").read_text())
    assert set(config["id2label"].values()) == {"neg", "pos"}
    assert (model_dir / "tokenizer.json").is_file() and (model_dir / "model.safetensors").is_file()

    messages = [record.getMessage() for record in caplog.records]
    speeds = [message for message in messages if message.startswith("Speed at step")]
    assert [message.split(":")[0] for message in speeds] == [
        f"Speed at step {step}" for step in (1, 2, 4)
    ]
    for text in speeds:
        assert "examples/s" in text and "tokens/s" in text and "ms/step" in text
        assert "TFLOPS" not in text, "no model-FLOPs utilization without a GPU"
    spent = [message for message in messages if message.startswith("Time spent")]
    assert len(spent) == 1
    assert "in 3 checkpoints" in spent[0] and "in 3 evaluations" in spent[0], spent
    # The job's goodput so far at the end, as the Keras variant writes it (goodput/*).
    scalars = last_scalars(tmp_path / "job" / "logs")
    assert scalars["eval/accuracy"][0] == 5, scalars  # the final model's, in the job's logs
    assert scalars["goodput/attempts"] == (5, 1.0), scalars
    assert 0 < scalars["goodput/goodput"][1] <= 1 and "goodput/paid_seconds" in scalars


def last_scalars(folder) -> dict[str, tuple[int, float]]:
    """Each TensorBoard scalar's last (step, value) in the event files under ``folder``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found = {}
    for path in sorted(folder.rglob("events.out.tfevents.*")):
        events = EventAccumulator(str(path))
        events.Reload()
        for tag in events.Tags()["scalars"]:
            last = events.Scalars(tag)[-1]
            found[tag] = (last.step, last.value)
    return found


@pytest.mark.parametrize(
    "flag, said",
    [
        ("--label-column=stars", "'stars'"),
        ("--text-column=body", "'body'"),
        ("NOPE", "no such file"),
    ],
)
def test_bad_input_is_one_line_error(tiny_bert, csv_data, tmp_path, capsys, flag, said):
    job = tmp_path / "job"
    flag = f"--train-data={tmp_path / 'nope.csv'}" if flag == "NOPE" else flag
    assert task.main([*base_args(tiny_bert, csv_data, job), flag]) == 2
    stderr = capsys.readouterr().err
    error_lines = [line for line in stderr.splitlines() if line.startswith("ERROR")]
    assert len(error_lines) == 1 and said in error_lines[0], stderr
    assert "Traceback" not in stderr
    assert not (job / "model").exists()


def test_scratch_model_is_the_same_every_time(tmp_path):
    """Every node and every restarted run builds the scratch model: same token ids, same weights."""
    texts = data.synthetic_examples(200, seed=3)["text"]
    vocabularies, weights = [], []
    for name in ("first", "second"):
        torch.manual_seed(len(name))  # the caller's RNG state must not matter
        folder = model.build_scratch(texts, str(tmp_path / name), hidden_size=32, vocab_size=200)
        vocabularies.append(AutoTokenizer.from_pretrained(folder).get_vocab())
        weights.append(load_file(os.path.join(folder, "model.safetensors")))
    assert vocabularies[0] == vocabularies[1]
    assert len(vocabularies[0]) > 50
    assert weights[0].keys() == weights[1].keys() and len(weights[0]) > 10
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])


def accuracy_of_export(model_dir, csv_path) -> float:
    """Ground truth: the exported folder loaded as a user would, predicting one row at a time."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    classifier = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    with open(csv_path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    hits = 0
    for row in rows:
        inputs = tokenizer(row["review"], truncation=True, return_tensors="pt")
        with torch.inference_mode():
            predicted = int(classifier(**inputs).logits.argmax(dim=-1))
        hits += classifier.config.id2label[predicted] == row["sentiment"]
    return hits / len(rows)


def test_training_reports_the_exported_models_accuracy_exports_and_predicts(
    tiny_bert, tmp_path, capsys, experiment_run, monkeypatch
):
    """What Vertex takes for the trial (the last measurement) is the exported model's accuracy,
    which ``trainer.predict`` scores too; the Experiment run logs each evaluation.

    Also after a restart that resumes from the final checkpoint (the VM went away before the
    export): that attempt trains no step but must still report, and export, the final model.
    """
    for name, value in experiment_run.env.items():  # as for a job with job.experiment
        monkeypatch.setenv(name, value)
    files = {
        "train": write_csv(tmp_path / "train.csv", reviews(256, seed=11, contradicted=True)),
        "eval": write_csv(tmp_path / "eval.csv", reviews(96, seed=12, contradicted=True)),
    }
    job, model_dir = tmp_path / "job", tmp_path / "job" / "model"
    # Truncated to 24 tokens in training; the tiny model's own limit is 128.
    argv = [*base_args(tiny_bert, files, job), "--max-seq-length=24", "--epochs=5"]
    metrics = os.environ["CLOUD_ML_HP_METRIC_FILE"]
    assert task.main([*argv, "--injected_by_vertex=1"]) == 0
    # One measurement per epoch (256 examples / batch 16 = 16 steps), tagged as in vertex.yaml.
    records = read_metrics(metrics)
    assert [int(r["global_step"]) for r in records] == [16, 32, 48, 64, 80]
    accuracy = float(records[-1]["accuracy"])
    assert accuracy > 0.8, f"the tiny BERT did not learn the first parts: {records}"
    assert accuracy_of_export(model_dir, files["eval"]) == pytest.approx(accuracy, abs=1e-9)
    # The Experiment run: the flags, each evaluation, the exported model's accuracy.
    logged = experiment_run.logged()
    assert logged["_params"]["epochs"] == 5 and logged["_state"] == "COMPLETE"
    assert [e["step"] for e in experiment_run.evaluations()] == [16, 32, 48, 64, 80]
    assert logged["_metrics"]["final_accuracy"] == pytest.approx(accuracy)
    config = json.loads((model_dir / "config.json").read_text())
    assert set(config["id2label"].values()) == {"negative", "positive"}
    assert (model_dir / "model.safetensors").is_file() and (model_dir / "tokenizer.json").is_file()
    assert os.listdir(job / "logs"), "no TensorBoard event files"

    # The exported model, reloaded by trainer.predict, scores what training reported.
    capsys.readouterr()
    predict_argv = ["--model-dir", str(model_dir), "--input-file", files["eval"]]
    assert predict.main([*predict_argv, "--text-column", "review"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    with open(files["eval"], newline="", encoding="utf-8") as handle:
        truth = [row["sentiment"] for row in csv.DictReader(handle)]
    hits = sum(line["label"] == label for line, label in zip(lines, truth, strict=True))
    assert len(lines) == len(truth)
    assert hits / len(truth) == pytest.approx(accuracy, abs=1.5 / len(truth))
    texts = ["Great superb wonderful film, brilliant cast.", "Awful boring terrible dull plot."]
    assert predict.main(["--model-dir", str(model_dir), *texts]) == 0
    labels = [json.loads(line)["label"] for line in capsys.readouterr().out.splitlines()]
    assert labels == ["positive", "negative"]

    for name in experiment_run.env:
        monkeypatch.delenv(name)
    shutil.rmtree(model_dir)
    os.remove(metrics)
    assert task.main(argv) == 0
    records = read_metrics(metrics)
    assert [int(r["global_step"]) for r in records] == [80]
    exported = accuracy_of_export(model_dir, files["eval"])
    assert float(records[-1]["accuracy"]) == pytest.approx(exported, abs=1e-9)


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "two"])
def test_gradient_accumulation_steps_must_be_a_whole_number_of_batches(value, tmp_path, capsys):
    """A bad value stops the run before anything is read or written (argparse's exit 2), with
    one error line naming the flag and what it takes."""
    argv = ["--train-data=synthetic", f"--model-dir={tmp_path}"]
    with pytest.raises(SystemExit) as stopped:
        task.main([*argv, f"--gradient-accumulation-steps={value}"])
    assert stopped.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "--gradient-accumulation-steps" in errors[0], errors
    assert "expected an integer" in errors[0]
    assert not any(tmp_path.iterdir())


def test_gradient_accumulation_steps_reach_the_trainer(tmp_path):
    """Hugging Face's own argument: it steps the optimizer every N batches and counts steps."""
    parsed = SPEC.parse(["--gradient-accumulation-steps=4"])
    assert train.training_arguments(parsed, str(tmp_path)).gradient_accumulation_steps == 4
    parsed = SPEC.parse([])
    assert train.training_arguments(parsed, str(tmp_path)).gradient_accumulation_steps == 1


def test_torchrun_workers_get_the_command_line_as_given():
    """Flags that argparse cannot spell back from the parsed values reach the workers."""
    given = ["--no-group-by-length", "--model_name_or_path", "scratch", "--epochs=2"]
    argv = distributed.worker_argv(["--local-dir=/node", "--model-name-or-path=/node/m"], given)
    worker = SPEC.parse(argv)
    assert worker.data.group_by_length is False
    assert worker.distributed.local_dir == "/node"
    assert (worker.model.model_name_or_path, worker.training.epochs) == ("/node/m", 2)
