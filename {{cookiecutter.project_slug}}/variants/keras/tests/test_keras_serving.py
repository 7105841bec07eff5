"""The exported SavedModel answers a Vertex prediction request (TF Serving's row format, as the
prebuilt TF prediction image serves it) with what the trainer's Keras model predicts."""

from __future__ import annotations

import numpy as np

from trainer import model as models

CLASSES = ("circle", "square", "triangle")


def test_savedmodel_answers_vertex_requests_as_the_keras_model(tmp_path, serve_model):
    classifier = models.build("small-cnn", len(CLASSES), 16, "none", False, 0.01)
    images = np.random.default_rng(0).uniform(0, 255, (4, 16, 16, 3)).astype(np.float32)
    classifier.fit(images, np.arange(4) % len(CLASSES), epochs=1, verbose=0)
    models.export(classifier, CLASSES, 16, str(tmp_path / "model"))

    response = serve_model(tmp_path / "model", images.tolist())
    expected = classifier(images, training=False).numpy()
    predictions = response["predictions"]
    assert len(predictions) == 4  # TF Serving's row format: one object of every output each
    assert set(predictions[0]) == {"probabilities", "class_index", "class_name"}
    served = np.array([row["probabilities"] for row in predictions])
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)
    assert [row["class_name"] for row in predictions] == [CLASSES[i] for i in expected.argmax(1)]
