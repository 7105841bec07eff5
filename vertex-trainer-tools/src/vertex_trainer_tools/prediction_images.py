"""Vertex's prebuilt prediction images as the tools know them: which export each one serves,
and one image per kind of export (the "e.g." of a refusal). ``check`` holds
``model.serving_image`` against the trainer's export with it, ``upload-model`` against the
files of a job's model folder.
"""

from __future__ import annotations

# Prebuilt prediction images, one per kind of export: the "e.g." of a refusal.
TF_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
HF_IMAGE = (
    "us-docker.pkg.dev/deeplearning-platform-release/gcr.io/"
    "huggingface-pytorch-inference-cpu.2-3.transformers.4-48.ubuntu2204.py311"
)
XGBOOST_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/xgboost-cpu.2-1:latest"
SKLEARN_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-5:latest"
TORCHSERVE_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/pytorch-cpu.2-4:latest"
# (what the image's name contains, the file the export must hold, what that file is, an image)
ARTIFACTS = (
    ("huggingface-pytorch-inference", ("config.json",), "a save_pretrained folder", HF_IMAGE),
    ("/prediction/tf", ("saved_model.pb",), "a TensorFlow SavedModel", TF_IMAGE),
    ("/prediction/tf_opt", ("saved_model.pb",), "a TensorFlow SavedModel", TF_IMAGE),
    (
        "/prediction/xgboost",
        ("model.bst", "model.joblib", "model.pkl"),
        "an XGBoost model",
        XGBOOST_IMAGE,
    ),
    ("/prediction/sklearn", ("model.joblib", "model.pkl"), "a scikit-learn model", SKLEARN_IMAGE),
    ("/prediction/pytorch", ("model.mar",), "a TorchServe archive", TORCHSERVE_IMAGE),
)


def serving_image_problem(image: str, export_file: str | None) -> str:
    """Why ``image`` (``model.serving_image``) cannot serve what the trainer exports, its
    ``export_file`` ('' when it can). Images this table does not know (custom containers) are
    not checked; the "e.g." is an image of the trainer's own export."""
    example = next((row[3] for row in ARTIFACTS if export_file in row[1]), XGBOOST_IMAGE)
    if not image:
        return f"missing: the prediction container of this trainer's export (e.g. {example})"
    for marker, served, what, _ in ARTIFACTS if export_file else ():
        if marker in image:
            if export_file in served:
                return ""
            return (
                f"{image.rsplit('/', 1)[-1]} serves {what} ({' or '.join(served)}), not this "
                f"trainer's export ({export_file}) (e.g. {example})"
            )
    return ""
