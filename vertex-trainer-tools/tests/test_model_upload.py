"""``make upload-model``: the Model Registry request of each variant, its versions, its labels,
the checks before it, and ``make submit UPLOAD=1`` chaining it after a job that succeeded.

Local jobs are job folders as ``make train-local`` leaves them: ``model/`` with the file the
serving image loads, and the chief's hypertune report under ``hypertune/workerpool0-0/``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cookiecutter.main import cookiecutter
from google.cloud import aiplatform_v1

from conftest import TEMPLATE
from fake_vertex import FakeGoogleCloud
from submit_helpers import (
    cloud_values,
    errors,
    make,
    offline_env,
    parse_strict,
    project_copy,
    write_config,
)
from vertex_trainer_tools import config as config_lib
from vertex_trainer_tools import model_upload

# What each variant exports, and the serving image family that loads it.
EXPORTS = {
    "keras": ("saved_model.pb", "/vertex-ai/prediction/tf2-cpu."),
    "pytorch": ("config.json", "/deeplearning-platform-release/gcr.io/huggingface-pytorch-"),
    "xgboost": ("model.bst", "/vertex-ai/prediction/xgboost-cpu."),
}
METRIC = 0.8125


def job_folder(project: Path, name: str, export: str, metric: float | None = METRIC) -> Path:
    """A finished local job: its model/ and (unless ``metric`` is None) the chief's report."""
    folder = project / "outputs" / "local" / name
    (folder / "model").mkdir(parents=True)
    (folder / "model" / export).write_text("{}")
    (folder / "model" / "variables").mkdir()
    (folder / "model" / "variables" / "variables.index").write_text("x")
    if metric is not None:
        cfg = config_lib.load(project / "vertex.yaml")
        report = folder / model_upload.CHIEF_METRICS
        report.parent.mkdir(parents=True)
        lines = [{cfg.hpt.metric.id: 0.5, "global_step": 1}, {cfg.hpt.metric.id: metric}]
        report.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return folder


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict[str, Path]:
    """Each variant baked with its defaults, vertex.yaml given real-looking cloud values."""
    baked = {}
    for framework in EXPORTS:
        output = tmp_path_factory.mktemp(framework)
        project = Path(
            cookiecutter(
                str(TEMPLATE),
                no_input=True,
                output_dir=str(output),
                default_config=True,
                extra_context={"framework": framework},
            )
        )
        write_config(project, cloud_values(yaml.safe_load((project / "vertex.yaml").read_text())))
        baked[framework] = project
    return baked


@pytest.mark.parametrize("framework", list(EXPORTS))
def test_dry_run_is_an_upload_model_request_whose_image_serves_the_export(
    variants, framework, tmp_path
):
    project = variants[framework]
    export, family = EXPORTS[framework]
    folder = job_folder(project, f"dry-{framework}", export)
    run = make(project, offline_env(tmp_path), "upload-model", "DRY_RUN=1", f"JOB={folder}")
    assert run.returncode == 0, run.stderr
    request = parse_strict(aiplatform_v1.UploadModelRequest, json.loads(run.stdout))
    cfg = config_lib.load(project / "vertex.yaml")
    model = request.model
    assert request.parent == f"projects/{cfg.project}/locations/{cfg.region}"
    assert not request.parent_model, "the dry run does not look models up"
    assert model.display_name == cfg.model.display_name
    assert family in model.container_spec.image_uri == cfg.model.serving_image
    assert model.artifact_uri == f"{cfg.staging_bucket}/models/{folder.name}/model"
    assert dict(model.labels) == {"job_id": folder.name, cfg.hpt.metric.id: "0_8125"}
    assert f"{cfg.hpt.metric.id}=0.8125" in model.version_description
    env = {var.name: var.value for var in model.container_spec.env}
    assert env == ({"HF_TASK": "text-classification"} if framework == "pytorch" else {})
    assert f"would go to {model.artifact_uri}" in run.stderr


@pytest.mark.parametrize("framework", list(EXPORTS))
def test_make_check_refuses_a_serving_image_that_cannot_serve_the_export(
    variants, framework, tmp_path
):
    """Found by ``make check``, not when a finished job uploads: no image, or another
    framework's; the "e.g." names this variant's own image (its default)."""
    project = variants[framework]
    export, _ = EXPORTS[framework]
    data = yaml.safe_load((project / "vertex.yaml").read_text())
    own = data["model"]["serving_image"]
    images = [
        yaml.safe_load((other / "vertex.yaml").read_text())["model"]["serving_image"]
        for name, other in variants.items()
        if name != framework
    ]
    try:
        for image in ["", *images]:
            data["model"]["serving_image"] = image
            write_config(project, data)
            run = make(project, offline_env(tmp_path), "check")
            (line,) = errors(run)
            assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
            assert "vertex.yaml:" in line and ": model.serving_image: " in line, line
            assert line.endswith(f"(e.g. {own})"), line
            if image:
                assert f"not this trainer's export ({export})" in line, line
    finally:
        data["model"]["serving_image"] = own
        write_config(project, data)
    assert make(project, offline_env(tmp_path), "check").returncode == 0


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.8125, "0_8125"), (-1.5, "-1_5"), (1e-07, "1e-07"), (0.123456789, "0_123457")],
)
def test_label_values_keep_to_google_clouds_characters(value, expected):
    assert model_upload.label_text(value) == expected
    assert model_upload.label_key("F1.Score") == "f1_score"
    assert model_upload.label_key("1st") == "m_1st"


@pytest.fixture
def project(tmp_path) -> Path:
    return project_copy(tmp_path)  # the package tests' variant (XGBoost unless told otherwise)


def export_of(project: Path) -> str:
    image = config_lib.load(project / "vertex.yaml").model.serving_image
    return next(export for export, family in EXPORTS.values() if family in image)


def upload(project: Path, tmp_path: Path, server, *args: str):
    return make(project, offline_env(tmp_path, VERTEX_API_ENDPOINT=server.url), *args)


def uploaded(server) -> list[dict]:
    return [body for method, path, body in server.requests if path.endswith("/models:upload")]


def test_a_second_upload_is_a_new_version_of_the_first_model(project, tmp_path):
    export = export_of(project)
    first = job_folder(project, "first-20260101-120000", export)
    second = job_folder(project, "second-20260102-120000", export, metric=0.9)
    dry = make(project, offline_env(tmp_path), "upload-model", "DRY_RUN=1", f"JOB={first}")
    with FakeGoogleCloud() as server:
        one = upload(project, tmp_path, server, "upload-model", f"JOB={first}")
        assert one.returncode == 0, one.stderr
        two = upload(project, tmp_path, server, "upload-model")  # the default: latest
        (project / "outputs" / "local" / "latest").symlink_to(second.name)
        three = upload(project, tmp_path, server, "upload-model")
    assert two.returncode == 2 and "outputs/local/latest does not exist" in errors(two)[0]
    assert three.returncode == 0, three.stderr
    bodies = uploaded(server)
    assert len(bodies) == 2 and "parentModel" not in bodies[0]
    assert bodies[0]["model"] == json.loads(dry.stdout)["model"], "the dry run is what is sent"
    ((name, versions),) = server.models.items()
    assert bodies[1]["parentModel"] == name and len(versions) == 2
    assert f"version 2 (new version of {name})" in three.stdout
    cfg = config_lib.load(project / "vertex.yaml")
    assert bodies[1]["model"]["labels"] == {
        "job_id": "second-20260102-120000",
        cfg.hpt.metric.id: "0_9",
    }
    artifact = bodies[0]["model"]["artifactUri"]
    assert artifact == "gs://demo-bucket/models/first-20260101-120000/model"
    copied = {uri for uri in server.uploads if uri.startswith(artifact + "/")}
    assert copied == {f"{artifact}/{export}", f"{artifact}/variables/variables.index"}


def test_a_vertex_job_uploads_its_base_output_dir_model_once_it_succeeded(project, tmp_path):
    name = "projects/demo-project-123/locations/us-central1/customJobs/4242"
    job = {"displayName": "x", "jobSpec": {"baseOutputDirectory": {"outputUriPrefix": "gs://b/r"}}}
    with FakeGoogleCloud() as server:
        server.jobs[name], server.polls[name] = {**job, "name": name}, 0
        server.uploads["gs://b/r/model/saved_model.pb"] = b""  # not what XGBoost's image loads
        wrong = upload(project, tmp_path, server, "upload-model", "JOB=4242")
        server.uploads = {f"gs://b/r/model/{export_of(project)}": b""}
        run = upload(project, tmp_path, server, "upload-model", "JOB=4242")
        server.end_state = "JOB_STATE_FAILED"
        failed = upload(project, tmp_path, server, "upload-model", f"JOB={name}")
    assert wrong.returncode == 2 and "gs://b/r/model: not " in errors(wrong)[0]
    assert run.returncode == 0, run.stderr
    (body,) = uploaded(server)
    assert body["model"]["artifactUri"] == "gs://b/r/model"
    assert body["model"]["labels"] == {"job_id": "4242"}  # Vertex keeps no final metric
    assert "no final" in run.stderr and "--metric" in run.stderr
    assert failed.returncode == 2
    assert errors(failed) == [
        f"ERROR: job {name} is JOB_STATE_FAILED: only a job that SUCCEEDED has a model"
    ]


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("serving_image", "not an image", "is not a full image URI"),
        ("labels", {"Team": "nlp"}, "is not a label key"),
        ("display_name", "x" * 129, "at most 128 characters"),
        ("env", {"1X": "y"}, "NAME: value"),
        ("serving_imag", "x", "unknown key (did you mean 'serving_image'?)"),
    ],
)
def test_a_bad_model_value_is_one_line_naming_it(project, tmp_path, key, value, why):
    job_folder(project, "job", export_of(project))
    data = yaml.safe_load((project / "vertex.yaml").read_text())
    data["model"][key] = value
    write_config(project, data)
    run = make(project, offline_env(tmp_path), "upload-model", "DRY_RUN=1", "JOB=outputs/local/job")
    assert run.returncode == 2
    (line,) = errors(run)
    assert f": model.{key}" in line and why in line, line
    assert run.stdout == ""


def test_an_export_the_serving_image_cannot_load_is_refused(project, tmp_path):
    wrong = "saved_model.pb" if export_of(project) != "saved_model.pb" else "model.bst"
    folder = job_folder(project, "wrong", wrong)
    env = offline_env(tmp_path)
    run = make(project, env, "upload-model", "DRY_RUN=1", f"JOB={folder}")
    assert run.returncode == 2 and run.stdout == ""
    (line,) = errors(run)
    assert f"{folder}/model: not " in line and export_of(project) in line
    check = make(project, env, "check", f"MODEL_DIR={folder}/model")
    assert errors(check) == [line]
    good = job_folder(project, "good", export_of(project))
    assert make(project, env, "check", f"MODEL_DIR={good}/model").returncode == 0


def test_submit_upload_chains_the_upload_after_success_only(project, tmp_path):
    with FakeGoogleCloud(model_files=(export_of(project),)) as server:
        run = upload(project, tmp_path, server, "submit", "UPLOAD=1")
        server.end_state = "JOB_STATE_FAILED"
        failed = upload(project, tmp_path, server, "submit", "UPLOAD=1")
        no_sync = upload(project, tmp_path, server, "submit", "UPLOAD=1", "SYNC=0")
    assert run.returncode == 0, run.stderr
    first, _ = server.created("customJobs")
    (body,) = uploaded(server)
    output = first["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"]
    assert body["model"]["artifactUri"] == f"{output}/model"
    assert "JOB_STATE_SUCCEEDED" in run.stdout and "Uploaded " in run.stdout
    assert failed.returncode != 0 and "JOB_STATE_FAILED" in errors(failed)[0]
    assert no_sync.returncode != 0 and len(server.created("customJobs")) == 2
    (line,) = errors(no_sync)
    assert "UPLOAD=1" in line and "SYNC=0" in line
