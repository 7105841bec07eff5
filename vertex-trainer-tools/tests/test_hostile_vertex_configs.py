"""Broken vertex.yaml files a new user writes, each refused on their machine before anything is
paid for: by ``vertex-tools check`` and by a dry-run ``submit``, with one located line that
names the field (``vertex.yaml:LINE: key: why``), no traceback and at most two lines. Valid
configs of every machine family (``vertex_limits``) are accepted, and their dry-run request
parses strictly into Vertex's types.

Data-driven and in-process: one project copy per test process, its vertex.yaml rewritten per
case.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from google.cloud import aiplatform_v1

from submit_helpers import (
    RAW,
    can_use_reduction_server,
    cloud_values,
    project_copy,
    submit_in_process,
    write_config,
)
from vertex_trainer_tools import cli, prediction_images
from vertex_trainer_tools import vertex_limits as limits

LOCATED = re.compile(r"^ERROR: \S*vertex\.yaml:\d+: ")


def pool(machine: str, accelerator: str = "NONE", count: int = 0, **more) -> dict:
    return {
        "machine_type": machine,
        "accelerator_type": accelerator,
        "accelerator_count": count,
        **more,
    }


def chief(machine: str, accelerator: str = "NONE", count: int = 0, **more) -> dict:
    return {"job.worker_pools": [pool(machine, accelerator, count, **more)]}


P0 = "job.worker_pools[0]"
A100, A100_80, H100 = "NVIDIA_TESLA_A100", "NVIDIA_A100_80GB", "NVIDIA_H100_80GB"
T4, V100, P100, P4, L4 = (
    "NVIDIA_TESLA_T4",
    "NVIDIA_TESLA_V100",
    "NVIDIA_TESLA_P100",
    "NVIDIA_TESLA_P4",
    "NVIDIA_L4",
)
NO_A = "takes no accelerators"
N1_ONLY = "N1 machines take T4, P4, V100 or P100 GPUs"
LONG = "x" * 200

# (id, {dotted key: value}, substring of the one refusal line)
BROKEN: list[tuple[str, dict, str]] = [
    # --- machine types that do not exist -----------------------------------------------------
    *[
        (f"typo-{m}", {f"{P0}.machine_type": m}, f"{P0}.machine_type: '{m}' is not a Vertex AI")
        for m in (
            "n1-standrad-8",
            "n1-standart-8",
            "n1-standard-7",
            "n9-standard-8",
            "n1-standard-1",
            "e2-standard-2",
            "a2-highgpu-3g",
            "a3-highgpu-16g",
            "g2-standard-6",
            "n2-standard-2",
            "c2-standard-32",
            "m1-ultramem-20",
            "a2-ultragpu-16g",
            "a3-ultragpu-1g",
        )
    ],
    ("typo-suggests", {f"{P0}.machine_type": "n1-standrad-8"}, "did you mean 'n1-standard-8'"),
    ("machine-pattern", {f"{P0}.machine_type": "N1 STANDARD 8"}, f"{P0}.machine_type"),
    # --- GPUs on machines that take none -----------------------------------------------------
    *[
        (f"cpu-{m}-{a}", chief(m, a, 1), f"{P0}.accelerator_type: {m} {NO_A}")
        for m, a in (
            ("e2-standard-4", T4),
            ("e2-highmem-8", L4),
            ("n2-standard-8", T4),
            ("n2d-standard-8", A100),
            ("c2-standard-8", V100),
            ("c2d-standard-8", T4),
            ("c3-standard-8", H100),
            ("m1-ultramem-40", T4),
            ("n2-highcpu-16", P100),
        )
    ],
    # --- accelerator-optimized GPUs on N1 ----------------------------------------------------
    *[
        (f"n1-{a}", chief("n1-standard-8", a, n), f"{P0}.accelerator_type: {N1_ONLY}, not {a}")
        for a, n in (
            (A100, 1),
            (A100_80, 1),
            (H100, 1),
            (L4, 1),
            ("NVIDIA_H200_141GB", 8),
            ("NVIDIA_B200", 8),
            ("NVIDIA_H100_MEGA_80GB", 8),
            ("TPU_V3", 8),
        )
    ],
    # --- the wrong GPU on a fixed machine ----------------------------------------------------
    *[
        (f"fixed-{m}-{a}", chief(m, a, n), f"{P0}.accelerator_type: {m} comes with")
        for m, a, n in (
            ("a2-highgpu-1g", T4, 1),
            ("a2-highgpu-1g", A100_80, 1),
            ("a2-ultragpu-1g", A100, 1),
            ("a3-highgpu-8g", A100, 8),
            ("a3-megagpu-8g", H100, 8),
            ("a3-ultragpu-8g", H100, 8),
            ("g2-standard-8", T4, 1),
            ("g2-standard-8", A100, 1),
            ("a2-megagpu-16g", H100, 16),
            ("a4-highgpu-8g", H100, 8),
            ("cloud-tpu", T4, 1),
            ("ct5lp-hightpu-4t", "TPU_V3", 4),
        )
    ],
    # --- the wrong count on a fixed machine --------------------------------------------------
    *[
        (f"count-{m}-{n}", chief(m, a, n), f"{P0}.accelerator_count: {m} comes with")
        for m, a, n in (
            ("a2-highgpu-1g", A100, 2),
            ("a2-highgpu-8g", A100, 4),
            ("a2-megagpu-16g", A100, 8),
            ("a2-ultragpu-2g", A100_80, 1),
            ("a3-highgpu-1g", H100, 8),
            ("a3-highgpu-8g", H100, 1),
            ("g2-standard-8", L4, 2),
            ("g2-standard-24", L4, 1),
            ("g2-standard-96", L4, 4),
            ("a3-ultragpu-8g", "NVIDIA_H200_141GB", 4),
        )
    ],
    ("count-hint", chief("a2-highgpu-1g", A100, 2), "(for 2: a2-highgpu-2g)"),
    # --- fixed machines without their GPUs ---------------------------------------------------
    *[
        (f"bare-{m}", chief(m), f"{P0}.accelerator_type: {m} comes with")
        for m in ("a2-highgpu-1g", "a3-highgpu-8g", "g2-standard-4", "a2-ultragpu-1g")
    ],
    # --- N1 counts and the vCPUs a count serves ----------------------------------------------
    *[
        (f"n1-count-{m}-{a}-{n}", chief(m, a, n), f"{P0}.accelerator_count")
        for m, a, n in (
            ("n1-standard-8", T4, 8),
            ("n1-standard-8", P4, 8),
            ("n1-standard-8", P100, 8),
            ("n1-standard-32", T4, 1),
            ("n1-standard-64", T4, 2),
            ("n1-standard-16", V100, 1),
            ("n1-standard-96", V100, 4),
            ("n1-highmem-32", P100, 1),
            ("n1-highcpu-96", P100, 4),
            ("n1-standard-8", T4, 16),
        )
    ],
    ("n1-count-generic", chief("n1-standard-8", T4, 3), "3 accelerators per replica"),
    # --- accelerators and counts without each other ------------------------------------------
    ("gpu-count-0", chief("n1-standard-8", T4, 0), f"{P0}.accelerator_count: must be >= 1"),
    ("count-no-gpu", chief("n1-standard-8", "NONE", 2), "2 without an accelerator_type"),
    ("k80", chief("n1-standard-8", "NVIDIA_TESLA_K80", 1), "K80 reached end of support"),
    ("unknown-gpu", chief("n1-standard-8", "NVIDIA_TESLA_T5", 1), "unknown accelerator"),
    ("gpu-lowercase-space", chief("n1-standard-8", "nvidia t4", 1), "unknown accelerator"),
    # --- worker pools beyond pool 0 ----------------------------------------------------------
    (
        "workers-a100-on-n1",
        {
            "job.worker_pools": [
                pool("n1-standard-8", T4, 1),
                pool("n1-standard-8", A100, 2, replica_count=2),
            ]
        },
        "job.worker_pools[1].accelerator_type",
    ),
    (
        "workers-typo",
        {"job.worker_pools": [pool("n1-standard-8"), pool("n1-standart-8", replica_count=2)]},
        "job.worker_pools[1].machine_type",
    ),
    (
        "five-pools",
        {
            "job.worker_pools": [pool("n1-standard-8")]
            + [pool("n1-standard-8", replica_count=1)] * 4
        },
        "job.worker_pools: 5 pools",
    ),
    (
        "five-pools-with-reduction-server",
        {
            "job.worker_pools": [pool("a2-highgpu-1g", A100, 1)] * 2
            + [{}, pool("n1-standard-8"), pool("n1-standard-8")],
            "job.reduction_server": {"replica_count": 2},
        },
        "job.worker_pools: 5 pools (job.reduction_server is pool 2)",
    ),
    (
        "reduction-server-typo",
        {"job.reduction_server": {"replica_count": 1, "machine_type": "n1-highcpu-17"}},
        "job.reduction_server.machine_type: 'n1-highcpu-17' is not",
    ),
    (
        "reduction-server-gpu-machine",
        {"job.reduction_server": {"replica_count": 1, "machine_type": "a2-highgpu-1g"}},
        "job.reduction_server.machine_type: a2-highgpu-1g comes with",
    ),
    (
        "reduction-server-replicas",
        {"job.reduction_server": {"replica_count": 1000000000}},
        "job.reduction_server.replica_count",
    ),
    (
        "reduction-server-image",
        {"job.reduction_server": {"replica_count": 1, "image_uri": "not an image"}},
        "job.reduction_server.image_uri: 'not an image' is not an image reference",
    ),
    # --- replicas -----------------------------------------------------------------------------
    (
        "workers-a-billion",
        {"job.worker_pools": [pool("n1-standard-8"), pool("n1-standard-8", replica_count=10**9)]},
        "job.worker_pools[1].replica_count",
    ),
    (
        "workers-1001",
        {"job.worker_pools": [pool("n1-standard-8"), pool("n1-standard-8", replica_count=1001)]},
        "job.worker_pools[1].replica_count",
    ),
    ("chief-replicas", {f"{P0}.replica_count": 2}, f"{P0}.replica_count: must be 1"),
    ("replicas-negative", {f"{P0}.replica_count": -1}, f"{P0}.replica_count"),
    ("replicas-text", {f"{P0}.replica_count": "two"}, f"{P0}.replica_count"),
    # --- names and their lengths -------------------------------------------------------------
    ("display-name-200", {"job.display_name": LONG}, "job.display_name: must be at most 128"),
    ("display-name-129", {"job.display_name": "y" * 129}, "job.display_name: must be at most 128"),
    ("display-name-empty", {"job.display_name": ""}, "job.display_name: must not be empty"),
    ("hpt-display-name-200", {"hpt.display_name": LONG}, "hpt.display_name: must be at most 128"),
    ("model-display-name", {"model.display_name": LONG}, "model.display_name: must be at most"),
    # --- regions -------------------------------------------------------------------------------
    ("region-typo", {"region": "us-centrall1"}, "region: 'us-centrall1' is not a Vertex AI"),
    ("region-not-registry", {"region": "us-centrall1"}, "region: 'us-centrall1' is not"),
    ("region-suggests", {"region": "us-centrall1"}, "did you mean 'us-central1'"),
    ("region-moon", {"region": "moon-base1"}, "region: 'moon-base1' is not a Vertex AI"),
    ("region-europe", {"region": "europe-west5"}, "region: 'europe-west5' is not"),
    ("region-zone", {"region": "us-central1-a"}, "region: 'us-central1-a' is not a region"),
    ("region-caps", {"region": "US-CENTRAL1"}, "region: 'US-CENTRAL1' is not a region"),
    ("registry-region", {"image.registry_host": "europe-west4-docker.pkg.dev"}, "use us-central1"),
    # --- image URIs and tags -------------------------------------------------------------------
    ("tag-bang", {"image.tag": "bad tag!"}, "image.tag: 'bad tag!' is not a Docker tag"),
    ("tag-200", {"image.tag": "t" * 200}, "image.tag: "),
    ("tag-129", {"image.tag": "t" * 129}, "image.tag: "),
    ("tag-dot", {"image.tag": ".hidden"}, "image.tag: '.hidden' is not a Docker tag"),
    ("tag-dash", {"image.tag": "-v1"}, "image.tag: '-v1' is not a Docker tag"),
    ("tag-colon", {"image.tag": "v1:2"}, "image.tag: 'v1:2'"),
    ("tag-slash", {"image.tag": "feature/x"}, "image.tag: 'feature/x'"),
    ("tag-unicode", {"image.tag": "vé"}, "image.tag: 'vé'"),
    (
        "pool-image-words",
        {"job.worker_pools": [pool("n1-standard-8", image_uri="not an image")]},
        f"{P0}.image_uri: 'not an image' is not an image reference",
    ),
    (
        "pool-image-caps",
        {"job.worker_pools": [pool("n1-standard-8", image_uri="gcr.io/P/Trainer:latest")]},
        f"{P0}.image_uri",
    ),
    (
        "pool-image-no-host",
        {"job.worker_pools": [pool("n1-standard-8", image_uri="trainer:latest")]},
        f"{P0}.image_uri: 'trainer:latest' names no registry host",
    ),
    (
        "pool-image-bad-tag",
        {"job.worker_pools": [pool("n1-standard-8", image_uri="gcr.io/p/t:bad!")]},
        f"{P0}.image_uri: 'gcr.io/p/t:bad!': tag 'bad!' is not a Docker tag",
    ),
    (
        "pool-image-long-tag",
        {"job.worker_pools": [pool("n1-standard-8", image_uri="gcr.io/p/t:" + "v" * 200)]},
        f"{P0}.image_uri",
    ),
    (
        "pool-image-bad-digest",
        {"job.worker_pools": [pool("n1-standard-8", image_uri="gcr.io/p/t@sha256:xyz")]},
        f"{P0}.image_uri",
    ),
    ("base-image-space", {"image.base_image": "python 3.11"}, "image.base_image: 'python 3.11'"),
    (
        "executor-image",
        {"python_package.executor_image_uri": "xgboost cpu"},
        "python_package.executor_image_uri: 'xgboost cpu' is not an image reference",
    ),
    (
        "executor-no-host",
        {"python_package.executor_image_uri": "xgboost-cpu:latest"},
        "python_package.executor_image_uri: 'xgboost-cpu:latest' names no registry host",
    ),
    (
        "serving-image-tag",
        {"model.serving_image": "us-docker.pkg.dev/vertex-ai/prediction/x:bad!"},
        "model.serving_image",
    ),
    # --- labels ---------------------------------------------------------------------------------
    ("label-float", {"job.labels": {"c": 1.0}}, "job.labels.c: '1.0' is not a label value"),
    ("label-list", {"job.labels": {"team": ["a", "b"]}}, "job.labels.team: expected one value"),
    ("label-map", {"job.labels": {"team": {"a": 1}}}, "job.labels.team: expected one value"),
    ("label-upper-key", {"job.labels": {"Team": "nlp"}}, "job.labels.Team: 'Team' is not a label"),
    ("label-upper-value", {"job.labels": {"team": "NLP"}}, "job.labels.team: 'NLP' is not"),
    ("label-digit-key", {"job.labels": {"1team": "x"}}, "'1team' is not a label key"),
    ("label-dash-key", {"job.labels": {"-team": "x"}}, "'-team' is not a label key"),
    ("label-dot-value", {"job.labels": {"v": "1.2"}}, "job.labels.v: '1.2' is not a label value"),
    ("label-space-value", {"job.labels": {"v": "a b"}}, "job.labels.v: 'a b' is not"),
    ("label-key-64", {"job.labels": {"k" * 64: "x"}}, "is not a label key"),
    ("label-value-64", {"job.labels": {"k": "v" * 64}}, "job.labels.k: "),
    ("label-empty-key", {"job.labels": {"": "x"}}, "'' is not a label key"),
    ("label-capital-ae", {"job.labels": {"Équipe": "x"}}, "'Équipe' is not a label key"),
    ("label-emoji", {"job.labels": {"team": "🚀"}}, "job.labels.team: '🚀' is not"),
    ("labels-65", {"job.labels": {f"k{i}": "v" for i in range(65)}}, "65 labels"),
    ("labels-not-mapping", {"job.labels": ["team=nlp"]}, "job.labels: expected a mapping"),
    ("model-label-job-id", {"model.labels": {"job_id": "mine"}}, "model.labels.job_id: is set by"),
    ("model-label-metric", {"model.labels": {"auc": "x"}}, "model.labels.auc: is set by"),
    ("model-label-upper", {"model.labels": {"Team": "x"}}, "model.labels.Team"),
    ("model-label-list", {"model.labels": {"team": [1]}}, "model.labels.team: expected one"),
    # --- environment ----------------------------------------------------------------------------
    ("env-list", {"job.env": {"A": [1, 2]}}, "job.env.A: expected one value"),
    ("env-map", {"job.env": {"A": {"b": 1}}}, "job.env.A: expected one value"),
    ("env-name", {"job.env": {"1A": "x"}}, "job.env: '1A' is not an environment variable name"),
    ("env-name-dash", {"job.env": {"LOG-LEVEL": "x"}}, "'LOG-LEVEL' is not an environment"),
    ("env-not-mapping", {"job.env": ["A=1"]}, "job.env: expected a mapping"),
    ("model-env-list", {"model.env": {"HF_TASK": ["a"]}}, "model.env.HF_TASK: expected one"),
    (
        "serving-image-empty",
        {"model.serving_image": ""},
        "model.serving_image: missing: the prediction container of this trainer's export "
        "(e.g. us-docker.pkg.dev/vertex-ai/prediction/xgboost-cpu.2-1:latest)",
    ),
    (
        "serving-image-sklearn-for-xgboost",
        {"model.serving_image": "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-5:latest"},
        "model.serving_image: sklearn-cpu.1-5:latest serves a scikit-learn model (model.joblib "
        "or model.pkl), not this trainer's export (model.bst)",
    ),
    (
        "serving-image-huggingface-for-xgboost",
        {"model.serving_image": prediction_images.HF_IMAGE},
        "serves a save_pretrained folder (config.json), not this trainer's export (model.bst) "
        "(e.g. us-docker.pkg.dev/vertex-ai/prediction/xgboost-cpu.2-1:latest)",
    ),
    *[
        (f"env-vertex-{name}", {"job.env": {name: value}}, f"job.env.{name}: is set by Vertex{why}")
        for name, value, why in (
            ("AIP_MODEL_DIR", "x", " on every replica, from base_output_dir"),
            ("AIP_CHECKPOINT_DIR", "/tmp/c", " on every replica, from base_output_dir"),
            ("AIP_TENSORBOARD_LOG_DIR", "gs://b/l", " on every replica, from base_output_dir"),
            ("CLUSTER_SPEC", "{}", " on every replica, from the worker pools"),
            ("TF_CONFIG", "{}", " on every replica, from the worker pools"),
            ("MASTER_ADDR", "10.0.0.2", " on every replica, from the worker pools"),
            ("WORLD_SIZE", 4, " on every replica, from the worker pools"),
            ("CLOUD_ML_PROJECT_ID", "p", " on every replica, from the project"),
            ("CLOUD_ML_JOB_ID", "1", " on every replica, from the job it runs"),
            ("CLOUD_ML_ANYTHING", "1", " on every replica, from the job it runs"),
            ("AIP_TRAINING_DATA_URI", "gs://b/d", " on every replica, from the job it runs"),
        )
    ],
    (
        "env-experiment-run",
        {
            "job.experiment": "runs",
            "job.service_account": "t@demo-project-123.iam.gserviceaccount.com",
            "job.env": {"AIP_EXPERIMENT_RUN_NAME": "mine"},
        },
        "job.env.AIP_EXPERIMENT_RUN_NAME: is set by vertex-tools submit",
    ),
]

# Every machine family with an accelerator it takes (and CPU machines without one).
VALID: list[tuple[str, dict]] = [
    *[(f"fixed-{m}", chief(m, a, n)) for m, (a, n) in limits.FIXED_ACCELERATORS.items()],
    ("tpu-v2", chief("cloud-tpu", "TPU_V2", 8)),
    *[
        (f"cpu-{m}", chief(m))
        for m in ("e2-standard-4", "n2-standard-8", "n2d-highcpu-224", "c2-standard-60")
        + ("c2d-highmem-112", "c3-standard-176", "m1-ultramem-160", "n1-highcpu-16")
    ],
    *[
        (f"n1-{m}-{a}-{n}", chief(m, a, n))
        for m, a, n in (
            ("n1-standard-8", T4, 1),
            ("n1-standard-8", T4, 4),
            ("n1-standard-32", T4, 2),
            ("n1-standard-96", T4, 4),
            ("n1-highmem-16", P4, 1),
            ("n1-standard-8", V100, 8),
            ("n1-standard-16", V100, 2),
            ("n1-highmem-96", V100, 8),
            ("n1-standard-16", P100, 1),
            ("n1-highcpu-64", P100, 4),
        )
    ],
    (
        "workers-and-reduction-server",
        {
            "job.worker_pools": [pool("a3-highgpu-8g", H100, 8), pool("a3-highgpu-8g", H100, 8)],
            "job.reduction_server": {"replica_count": 2, "machine_type": "n1-highcpu-16"},
        },
    ),
    ("four-pools", {"job.worker_pools": [pool("n1-standard-8")] + [pool("n1-standard-4")] * 3}),
    (
        "workers-1000",
        {"job.worker_pools": [pool("e2-standard-4"), pool("e2-standard-4", replica_count=1000)]},
    ),
    ("display-name-128", {"job.display_name": "d" * 128}),
    (
        "region-europe-west4",
        {"region": "europe-west4", "image.registry_host": "europe-docker.pkg.dev"},
    ),
    ("tag-128", {"image.tag": "t" * 128}),
    ("tag-sha", {"image.tag": "3f2a9c1_build.7-rc"}),
    ("base-image-hub", {"image.base_image": "python:3.11-slim"}),
    (
        "pool-image-digest",
        {
            "job.worker_pools": [
                pool("n1-standard-8", image_uri="gcr.io/p/t@sha256:" + "a" * 64),
            ]
        },
    ),
    ("labels-international", {"job.labels": {"équipe": "données", "ラベル": "ｎｌｐ", "k": ""}}),
    ("labels-numbers", {"job.labels": {"a": 1, "b": 0, "c": True, "d": False, "e": None}}),
    ("env-values", {"job.env": {"DEBUG": True, "N": 1, "R": 1.0, "E": None, "S": "x"}}),
    ("model-labels", {"model.labels": {"team": "nlp", "équipe": "ml"}}),
]


def apply(changes: dict) -> dict:
    data = cloud_values(RAW)
    for key, value in changes.items():
        *parents, last = re.findall(r"[^.\[\]]+", key)
        node = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        if last.isdigit():
            node[int(last)] = copy.deepcopy(value)
        else:
            node[last] = copy.deepcopy(value)
    return data


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    copied = project_copy(tmp_path_factory.mktemp("hostile"))
    can_use_reduction_server(copied)  # as the Keras and PyTorch trainers can
    return copied


@pytest.fixture
def run(project, tmp_path, monkeypatch, capsys):
    """``(check's code and stderr, submit --dry-run's code, stdout and stderr)`` of a config."""
    submit = submit_in_process(project, tmp_path, monkeypatch, capsys)

    def run_both(data: dict):
        write_config(project, data)
        code = cli.main(["check", "--config", "vertex.yaml"])
        checked = capsys.readouterr()
        submitted = submit("--dry-run")
        return (code, checked.err), submitted

    return run_both


def refusal(err: str) -> list[str]:
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.startswith("ERROR:")]


@pytest.mark.parametrize(
    ("changes", "expected"), [c[1:] for c in BROKEN], ids=[c[0] for c in BROKEN]
)
def test_a_broken_config_is_refused_with_one_located_line(run, changes, expected):
    (code, err), (submit_code, out, submit_err) = run(apply(changes))
    for name, status, stream in (("check", code, err), ("submit", submit_code, submit_err)):
        lines = refusal(stream)
        assert status == 2 and lines, f"{name} accepted it:\n{stream}"
        assert len(lines) <= 2, f"{name} refused it in {len(lines)} lines:\n{stream}"
        assert all(LOCATED.match(line) for line in lines), stream
        assert any(expected in line for line in lines), f"{name}: {expected!r} not in\n{stream}"
    assert not out.strip(), "a refused dry run prints no request"


@pytest.mark.parametrize("changes", [c[1] for c in VALID], ids=[c[0] for c in VALID])
def test_a_valid_config_is_accepted_and_its_request_parses_strictly(run, changes):
    data = apply(changes)
    (code, err), (submit_code, out, submit_err) = run(data)
    assert code == 0, err
    assert submit_code == 0, submit_err
    job = aiplatform_v1.CustomJob.from_json(out, ignore_unknown_fields=False)
    specs = job.job_spec.worker_pool_specs
    for index, wanted in enumerate(data["job"]["worker_pools"]):
        if not wanted:
            continue
        machine = specs[index].machine_spec
        assert machine.machine_type == wanted["machine_type"]
        assert machine.accelerator_count == wanted["accelerator_count"]


def test_labels_and_env_are_sent_as_the_user_wrote_them(run):
    labels = {"a": 1, "b": 0, "d": True, "e": False, "f": None, "équipe": "données"}
    env = {"DEBUG": True, "N": 1, "R": 1.0, "BIG": 12345678901234567890, "E": None}
    data = apply({"job.labels": labels, "job.env": env})
    (code, err), (submit_code, out, submit_err) = run(data)
    assert (code, submit_code) == (0, 0), err + submit_err
    job = aiplatform_v1.CustomJob.from_json(out)
    assert dict(job.labels) == {
        "a": "1",
        "b": "0",
        "d": "true",
        "e": "false",
        "f": "",
        "équipe": "données",
    }
    sent = {e.name: e.value for e in job.job_spec.worker_pool_specs[0].container_spec.env}
    assert sent == {"DEBUG": "true", "N": "1", "R": "1.0", "BIG": "12345678901234567890", "E": ""}


def test_the_table_answers_the_template_hook_in_its_words():
    assert limits.answer_problems("n1-standard-8", T4, 1) == []
    (line,) = limits.answer_problems("n1-standrad-8", T4, 1)
    assert line.startswith("machine_type: 'n1-standrad-8'") and "n1-standard-8" in line
    (line,) = limits.answer_problems("n1-standard-8", A100, 1)
    assert line.startswith("accelerator_type: ") and "a2-highgpu-1g (1)" in line


def test_the_hostile_set_is_large_and_covers_every_fixed_machine():
    assert len(BROKEN) >= 100
    valid_machines = {
        c[1]["job.worker_pools"][0]["machine_type"] for c in VALID if "job.worker_pools" in c[1]
    }
    assert set(limits.FIXED_ACCELERATORS) <= valid_machines


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--tag=bad tag!"], "ERROR: --tag (TAG=): 'bad tag!' is not a Docker tag"),
        (["--tag=" + "t" * 129], "ERROR: --tag (TAG=): "),
        (["--display-name=" + LONG], "ERROR: --display-name: must be at most 128 characters"),
    ],
)
def test_submit_refuses_a_bad_tag_or_name_on_its_command_line(
    project, tmp_path, monkeypatch, capsys, argv, expected
):
    write_config(project, cloud_values(RAW))
    submit = submit_in_process(project, tmp_path, monkeypatch, capsys)
    code, out, err = submit("--dry-run", *argv)
    assert code == 2 and not out.strip()
    assert refusal(err) == [line for line in err.splitlines() if line.startswith(expected)]


def test_build_refuses_a_bad_tag_or_base_image_before_docker(project, monkeypatch, capsys):
    write_config(project, cloud_values(RAW))
    monkeypatch.chdir(project)
    assert cli.main(["build", "--dry-run", "--tag=bad tag!"]) == 2
    assert refusal(capsys.readouterr().err) == [
        "ERROR: --tag (TAG=): 'bad tag!' is not a Docker tag: 1-128 letters, digits, "
        "'_', '.' or '-', not starting with '.' or '-' (e.g. latest)"
    ]
    assert cli.main(["build", "--dry-run", "--base-image=python 3.11"]) == 2
    (line,) = refusal(capsys.readouterr().err)
    assert line.startswith("ERROR: --base-image (BASE_IMAGE=): 'python 3.11' is not an image")
