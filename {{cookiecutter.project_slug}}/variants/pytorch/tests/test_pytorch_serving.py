"""The save_pretrained export answers a Vertex prediction request through hf-serve, the serving
library of Google's Hugging Face PyTorch inference container (installed once into a cache: slow
the first time), with what ``trainer.predict`` says."""

from __future__ import annotations

import pytest
from conftest import smoke_args
from transformers import AutoModelForSequenceClassification

from trainer import model as models
from trainer import predict

pytestmark = pytest.mark.slow

TEXTS = ["a great film, loved it", "boring and bad", "fine"]


def test_save_pretrained_answers_vertex_requests_through_hf_serve(
    tiny_bert, tmp_path, local_job, serve_model
):
    job = local_job(tmp_path / "job", smoke_args(tiny_bert))  # as `make train-local` runs it
    assert job.returncode == 0, job.tail()
    model_dir = str(job.output_dir / "model")

    response = serve_model(model_dir, TEXTS)
    classifier = AutoModelForSequenceClassification.from_pretrained(model_dir)
    expected = predict.predict(classifier, models.load_tokenizer(model_dir), TEXTS)
    served = [prediction[0] for prediction in response["predictions"]]  # the top class each
    assert [answer["label"] for answer in served] == [label for label, _ in expected]
    assert [answer["score"] for answer in served] == pytest.approx(
        [score for _, score in expected], rel=1e-4
    )
