"""gcp_names.py and preflight.py: Google Cloud's naming rules, the one copy of them.

The template's answers are checked by these same rules (its post-generation hook loads the
rendered vertex.yaml), so each rule here is also what a bad answer runs into.
"""

from __future__ import annotations

import copy
import importlib

import pytest
import yaml

from conftest import PROJECT
from vertex_trainer_tools.errors import ToolError

config_lib = importlib.import_module("vertex_trainer_tools.config")
preflight = importlib.import_module("vertex_trainer_tools.preflight")

RAW = yaml.safe_load((PROJECT / "vertex.yaml").read_text())


def valid() -> dict:
    data = copy.deepcopy(RAW)
    data.update(project="demo-project-123", region="us-central1")
    data.update(staging_bucket="gs://demo-bucket", base_output_dir="gs://demo-bucket/runs")
    data["image"]["registry_host"] = "us-central1-docker.pkg.dev"
    data["job"]["worker_pools"][0].update(accelerator_type="NVIDIA_TESLA_T4", accelerator_count=1)
    return data


def problems(data: dict) -> list[str]:
    with pytest.raises(ToolError) as caught:
        config_lib.parse(data, "vertex.yaml")
    return caught.value.lines


RESERVED = "uses a reserved form ('goog', 'google' or an IP) (e.g. gs://my-project-123-vertex)"
PARTS = "each dot-separated part has 1-63 characters (e.g. gs://my-project-123-vertex)"


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("project", "google-trainer", "'google-trainer' is not a project ID: no 'google' in it"),
        ("project", "abc", "'abc' is not a project ID: 6-30 lowercase letters, digits or"),
        ("staging_bucket", "gs://goog-bucket", f"bucket 'goog-bucket' {RESERVED}"),
        ("staging_bucket", "gs://my-google-bucket/x", f"bucket 'my-google-bucket' {RESERVED}"),
        ("staging_bucket", "gs://192.168.0.1", f"bucket '192.168.0.1' {RESERVED}"),
        ("staging_bucket", "gs://" + "a" * 64, f"bucket '{'a' * 64}': {PARTS}"),
        ("base_output_dir", "gs://a..b/runs", f"bucket 'a..b': {PARTS}"),
        ("image.repository", "-trainers", "'-trainers' is not a repository name: lowercase"),
        ("image.repository", "Trainers", "'Trainers' is not a repository name: lowercase"),
        ("image.name", "trainer:latest", "'trainer:latest' is not a Docker image name"),
        ("image.name", "a" * 129, f"'{'a' * 129}' is not a Docker image name"),
        (
            "job.worker_pools[0].accelerator_count",
            3,
            "3 accelerators per replica are not offered: use 1, 2, 4, 8, 16 (e.g. 1)",
        ),
    ],
)
def test_google_cloud_naming_rules_are_one_line_naming_the_key(key, value, expected):
    data = valid()
    *parents, name = key.replace("[0]", ".0").split(".")
    target = data
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    target[name] = value
    (line,) = problems(data)
    assert line.startswith("vertex.yaml: ") and f" {key}: {expected}" in line, line
    assert "\n" not in line


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("project", "my-project-123"),
        ("staging_bucket", "gs://my.bucket.example.com"),
        ("image.name", "team/trainer.v2"),
        ("image.name", "my--trainer"),
        ("image.repository", "t"),
    ],
)
def test_valid_names_pass(key, value):
    data = valid()
    if "." in key:
        data["image"][key.split(".")[1]] = value
    else:
        data[key] = value
    config_lib.parse(data, "vertex.yaml")


def test_no_accelerators_without_an_accelerator_type():
    data = valid()
    data["job"]["worker_pools"][0].update(accelerator_type="NONE", accelerator_count=1)
    (line,) = problems(data)
    assert line.endswith(
        "job.worker_pools[0].accelerator_count: 1 without an accelerator_type: make it 0 (e.g. 0)"
    )


def test_global_is_not_a_training_region():
    # "global" is in the SDK's SUPPORTED_REGIONS, but no custom job runs there.
    assert "global" not in preflight.regions() and "us-central1" in preflight.regions()
    cfg = config_lib.parse(valid(), "vertex.yaml").model_copy(update={"region": "global"})
    assert preflight.vertex_problems(cfg) == [
        ("region", "'global' is not a Vertex AI training region (e.g. us-central1)")
    ]
