"""Google's dates of the prebuilt images: check warns, package mode and uploads refuse.

The day is injected (``image_dates.today``): the table's dates are Google's, the verdicts
follow from them on any day.
"""

from __future__ import annotations

import datetime
import importlib
from pathlib import Path

import pytest

from submit_helpers import RAW, cloud_values, project_copy, submit_in_process, write_config

image_dates = importlib.import_module("vertex_trainer_tools.image_dates")
cli = importlib.import_module("vertex_trainer_tools.cli")
config_lib = importlib.import_module("vertex_trainer_tools.config")
model_upload = importlib.import_module("vertex_trainer_tools.model_upload")
ToolError = importlib.import_module("vertex_trainer_tools.errors").ToolError

TF = "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest"
TF_214 = "europe-docker.pkg.dev/vertex-ai/training/tf-gpu.2-14.py310:latest"
SERVING_213 = "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-13:latest"
SERVING_215 = "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
XGBOOST_SERVING = "us-docker.pkg.dev/vertex-ai/prediction/xgboost-cpu.2-1:latest"  # undated
DAY = datetime.date


def test_every_row_is_dated_from_a_source_read_on_a_day():
    rows = image_dates.rows()
    assert {row.role for row in rows} == {"executor", "prediction", "base"}
    for row in rows:
        assert row.source.startswith("https://") and DAY.fromisoformat(row.read_on), row
        assert row.accelerator in {"cpu", "gpu"}, row
        if row.end_of_patch and row.end_of_availability:
            assert row.end_of_patch < row.end_of_availability, row
        if not (row.end_of_patch or row.end_of_availability):
            assert row.note, f"{row.image}: say why it has no date"
    assert len({image_dates.key(row.image) for row in rows}) == len(rows), "one row an image"


def test_the_table_ships_in_the_wheel():
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert '[tool.setuptools.package-data]\nvertex_trainer_tools = ["data/*.csv"]' in pyproject


def test_an_image_is_refused_the_day_after_its_end_of_availability():
    assert image_dates.refusal(TF, DAY(2026, 7, 11)) == ""
    why = image_dates.refusal(TF, DAY(2026, 7, 12))
    assert why.startswith("tf-cpu.2-17.py310 (TensorFlow 2.17) reached its end of availability")
    assert "on 2026-07-11 (Google's table, read 2026-11-29)" in why
    assert why.endswith("use the custom container (make submit without PACKAGE=1)"), why


def test_the_refusal_names_the_newest_replacement_of_the_same_kind():
    why = image_dates.refusal(TF_214, DAY(2026, 1, 1))  # europe- copy, GPU row
    assert "newest in the table: us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310" in why
    assert "(available until 2026-07-11)" in why


def test_past_the_end_of_patch_is_a_warning_not_a_refusal():
    assert image_dates.refusal(SERVING_215, DAY(2026, 11, 29)) == ""
    why = image_dates.warning(SERVING_215, DAY(2026, 11, 29))
    assert "gets no patches since 2026-01-14, available until 2027-01-14" in why
    assert image_dates.warning(SERVING_215, DAY(2026, 1, 14)) == ""


def test_images_the_table_lacks_are_not_dated():
    custom = "us-central1-docker.pkg.dev/p/r/trainer:latest"
    assert image_dates.warning(custom, DAY(2099, 1, 1)) == ""


@pytest.fixture
def project(tmp_path):
    return project_copy(tmp_path)


def configure(project, executor: str, serving: str = XGBOOST_SERVING):
    data = cloud_values(RAW)
    data["python_package"]["executor_image_uri"] = executor
    data["model"]["serving_image"] = serving
    write_config(project, data)


def test_package_mode_refuses_an_executor_past_its_end_of_availability(
    project, tmp_path, monkeypatch, capsys
):
    submit = submit_in_process(project, tmp_path, monkeypatch, capsys)
    configure(project, TF)
    monkeypatch.setattr(image_dates, "today", lambda: DAY(2026, 11, 29))
    for argv in (["--dry-run", "--package"], ["--gcloud-config", "--package"]):
        code, out, err = submit(*argv)
        (line,) = err.strip().splitlines()
        assert code == 2 and out == "", err
        assert line.startswith("ERROR: vertex.yaml: python_package.executor_image_uri: tf-cpu")
        assert "make submit without PACKAGE=1" in line
    code, out, err = submit("--dry-run")  # the custom container: not the executor's business
    assert code == 0 and "executor" not in err, err


def test_package_mode_without_an_executor_names_the_custom_container(
    project, tmp_path, monkeypatch, capsys
):
    submit = submit_in_process(project, tmp_path, monkeypatch, capsys)
    configure(project, "")
    code, out, err = submit("--dry-run", "--package")
    assert code == 2, err
    assert err.strip() == (
        "ERROR: vertex.yaml: python_package.executor_image_uri: empty: no prebuilt training "
        "image of Google's is still available for this trainer "
        "(vertex_trainer_tools/data/image_dates.csv); use the custom container "
        "(make submit without PACKAGE=1)"
    )


def test_check_warns_and_passes(project, tmp_path, monkeypatch, capsys):
    submit_in_process(project, tmp_path, monkeypatch, capsys)  # the project, offline
    configure(project, TF)
    monkeypatch.setattr(image_dates, "today", lambda: DAY(2026, 11, 29))
    code = cli.main(["check", "--config", "vertex.yaml"])
    captured = capsys.readouterr()
    # (the project copy has no requirements.lock: test_lock.py holds that warning)
    (line,) = [line for line in captured.err.splitlines() if "requirements.lock" not in line]
    assert code == 0 and captured.out.strip() == "vertex.yaml: OK", captured
    assert line.startswith("WARNING: vertex.yaml: python_package.executor_image_uri: tf-cpu")
    assert line.endswith("(used by PACKAGE=1)"), line
    # A serving image past its end of patch: warned, with what make upload-model would do.
    configure(project, TF, SERVING_215)
    cfg = config_lib.load("vertex.yaml")
    lines = image_dates.check_warnings(cfg, DAY(2026, 11, 29))
    assert [line.split(": ")[1] for line in lines] == [
        "python_package.executor_image_uri",
        "model.serving_image",
    ], lines
    assert "gets no patches since 2026-01-14" in lines[1] and lines[1].endswith("upload-model)")


def test_an_upload_refuses_a_serving_image_past_its_end_of_availability(
    project, tmp_path, monkeypatch, capsys
):
    submit = submit_in_process(project, tmp_path, monkeypatch, capsys)
    configure(project, TF, SERVING_213)
    monkeypatch.setattr(image_dates, "today", lambda: DAY(2026, 11, 29))
    cfg = config_lib.load("vertex.yaml")
    with pytest.raises(ToolError) as refused:
        model_upload.upload_model(cfg, "", dry_run=True)
    (line,) = refused.value.lines
    assert line.startswith("vertex.yaml: model.serving_image: tf2-cpu.2-13 (TensorFlow 2.13)")
    assert "newest in the table: us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15" in line
    code, out, err = submit("--upload-model", "--sync", "--skip-remote-checks")
    assert code == 2 and "vertex.yaml: model.serving_image: tf2-cpu.2-13 (" in err, err
