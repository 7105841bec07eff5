"""model.bst answers a Vertex prediction request through the xgboost of Vertex's prebuilt
xgboost-cpu.2-1 prediction image (a cached venv of its own: slow the first time) with what the
trainer's xgboost predicts."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SMOKE_ARGS, features, load_model

from trainer import data

pytestmark = pytest.mark.slow


def test_model_bst_answers_vertex_requests_in_the_prediction_images_xgboost(
    tmp_path, local_job, serve_model, capfd
):
    job = local_job(tmp_path / "job", SMOKE_ARGS)
    assert job.returncode == 0, job.tail()
    booster, metadata = load_model(job.output_dir / "model")
    frame = data.synthetic("synthetic:8", "eval", label_column="label", kind="binary", seed=7)
    frame.loc[0, "color"] = "purple"  # unknown text: NaN (missing), as model_metadata.json says
    rows = features(frame, metadata).get_data().toarray()
    rows[0, -1] = np.nan
    instances = [[None if np.isnan(v) else float(v) for v in row] for row in rows]

    response = serve_model(job.output_dir / "model", instances)
    expected = booster.predict(features(frame, metadata))
    np.testing.assert_allclose(response["predictions"], expected, rtol=1e-6, atol=1e-7)
    assert "served by xgboost 2.1." in capfd.readouterr().err
