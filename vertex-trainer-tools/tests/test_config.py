"""config.py: vertex.yaml is read, checked and turned into derived values in one place."""

from __future__ import annotations

import copy
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import PROJECT
from vertex_trainer_tools.errors import ToolError

cli = importlib.import_module("vertex_trainer_tools.cli")
config_lib = importlib.import_module("vertex_trainer_tools.config")

RAW = yaml.safe_load((PROJECT / "vertex.yaml").read_text())


def real_values(raw: dict) -> dict:
    """The project's own vertex.yaml with the template's placeholders replaced."""
    data = copy.deepcopy(raw)
    data["project"] = "demo-project-123"
    data["staging_bucket"] = "gs://demo-bucket"
    data["base_output_dir"] = "gs://demo-bucket/runs"
    return data


def parse(data: dict) -> config_lib.Config:
    return config_lib.parse(data, "vertex.yaml")


def problems(data: dict) -> list[str]:
    with pytest.raises(ToolError) as caught:
        parse(data)
    return caught.value.lines


def test_the_generated_config_is_valid_and_names_its_placeholders():
    cfg = config_lib.load(PROJECT / "vertex.yaml")
    assert cfg.job.worker_pools[0].machine_type
    assert cfg.hpt is not None and cfg.hpt.parameters
    assert cfg.python_package is not None
    # The template's default project is a placeholder: submit refuses it, offline tools warn.
    flagged = any(": project: " in line for line in cfg.placeholders())
    assert flagged == (cfg.project == "my-gcp-project")
    assert parse(real_values(RAW)).placeholders() == []


def test_derived_values_come_from_the_parts():
    data = real_values(RAW)
    data["image"].update(registry_host="europe-west4-docker.pkg.dev", name="img", tag="v1")
    data["region"] = "europe-west4"
    cfg = parse(data)
    repo = data["image"]["repository"]
    assert cfg.image_repository == f"europe-west4-docker.pkg.dev/demo-project-123/{repo}/img"
    assert cfg.image_uri == cfg.image_repository + ":v1"
    assert cfg.image_uri_with_tag("abc123").endswith("/img:abc123")
    assert cfg.registry_location == "europe-west4"
    assert cfg.bucket_name == "demo-bucket"
    assert cfg.get("image_uri") == cfg.image_uri
    assert cfg.get("job.worker_pools.0.replica_count") == 1
    with pytest.raises(KeyError):
        cfg.get("job.nope")


def test_a_domain_scoped_project_is_a_path_in_artifact_registry():
    # Artifact Registry: "example.com:my-project" is written example.com/my-project in paths.
    data = real_values(RAW)
    data["project"] = "example.com:my-proj"
    cfg = parse(data)
    host, repo, name = (data["image"][key] for key in ("registry_host", "repository", "name"))
    assert cfg.image_repository == f"{host}/example.com/my-proj/{repo}/{name}"
    assert cfg.image_uri.count(":") == 1


def test_get_command_prints_one_value_for_the_makefile(tmp_path):
    path = tmp_path / "vertex.yaml"
    path.write_text(yaml.safe_dump(real_values(RAW)))
    run = subprocess.run(
        [sys.executable, "-m", "vertex_trainer_tools", "get", f"--config={path}", "image_uri"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == config_lib.load(path).image_uri
    run = subprocess.run(
        [sys.executable, "-m", "vertex_trainer_tools", "check", "--config=vertex.yaml"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
    )
    placeholders = config_lib.load(PROJECT / "vertex.yaml").placeholders()
    assert run.returncode == (2 if placeholders else 0)
    assert len(run.stderr.strip().splitlines()) == len(placeholders)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda d: d.update(staging_bucket="my-bucket"),
            "staging_bucket: 'my-bucket' is not a bucket URI",
        ),
        (lambda d: d.update(region="us central"), "region: 'us central' is not a region"),
        (lambda d: d["image"].update(name=""), "image.name: must not be empty (e.g. trainer)"),
        # Empty text is refused wherever empty does not mean "not set".
        (lambda d: d.update(region=""), "region: must not be empty (e.g. us-central1)"),
        (lambda d: d.update(project=" "), "project: must not be empty (e.g. my-project-123)"),
        (
            lambda d: d["job"]["worker_pools"][0].update(machine_type=""),
            "job.worker_pools[0].machine_type: must not be empty (e.g. n1-standard-8)",
        ),
        (
            lambda d: d["job"].update(reduction_server={"replica_count": 2, "machine_type": ""}),
            "job.reduction_server.machine_type: must not be empty (e.g. n1-highcpu-16)",
        ),
        (lambda d: d["image"].update(registry_host=""), "image.registry_host: must not be empty"),
        (lambda d: d["job"].update(display_name=""), "job.display_name: must not be empty"),
        (
            lambda d: d["python_package"].update(python_module=""),
            "python_package.python_module: must not be empty (e.g. trainer.task)",
        ),
        (
            lambda d: d["job"].update(network="my-vpc"),
            "job.network: 'my-vpc' is not a VPC network name: projects/PROJECT_NUMBER/global/"
            "networks/NAME (e.g. projects/123456789012/global/networks/my-vpc)",
        ),
        (
            lambda d: d["job"].update(experiment="my-runs", service_account=""),
            "job.service_account: Vertex AI Experiments need a service account",
        ),
        (
            lambda d: d["job"]["scheduling"].update(strategy="FLEX_START"),
            "job.worker_pools[0].accelerator_type: FLEX_START offers L4, A100, H100, H200 and "
            "B200 GPUs, not NVIDIA_TESLA_T4 (e.g. NVIDIA_L4)",
        ),
        # Capacity and cost settings.
        (
            lambda d: d["job"].update(labels={"Team": "nlp"}),
            "job.labels.Team: 'Team' is not a label key: 1-63 lowercase letters",
        ),
        (
            lambda d: d["job"].update(labels={"team": "NLP team"}),
            "job.labels.team: 'NLP team' is not a label value",
        ),
        (
            lambda d: d["job"].update(labels={"team": "x" * 64}),
            "is not a label value: at most 63 lowercase letters",
        ),
        (
            lambda d: d["job"].update(labels={f"k{i}": "v" for i in range(65)}),
            "job.labels: 65 labels: Google Cloud allows 64 at most",
        ),
        (lambda d: d["job"].update(labels=["team"]), "job.labels: expected a mapping of key"),
        (
            lambda d: d["job"].update(persistent_resource_id="My_Cluster"),
            "job.persistent_resource_id: 'My_Cluster' is not a persistent resource ID",
        ),
        (
            lambda d: d["job"].update(reservation="h100s"),
            "job.reservation: 'h100s' is not any, none or a reservation name: "
            "projects/PROJECT/zones/ZONE/reservations/NAME",
        ),
        (
            lambda d: d["job"].update(
                reservation="projects/demo-project-123/zones/europe-west4-a/reservations/h100s"
            ),
            "job.reservation: is in zone europe-west4-a but jobs run in region us-central1",
        ),
        (
            lambda d: d["job"].update(reservation="any", persistent_resource_id="cluster-1"),
            "job.reservation: a job on a persistent resource runs on that resource's machines",
        ),
        (
            lambda d: (
                d["job"].update(reservation="any"),
                d["job"]["scheduling"].update(strategy="FLEX_START"),
            ),
            "job.reservation: FLEX_START queues for capacity instead of consuming a reservation",
        ),
        (
            lambda d: d["job"]["scheduling"].update(
                disable_retries=True, restart_job_on_worker_restart=True
            ),
            "job.scheduling.disable_retries: turns restart_job_on_worker_restart off on Vertex",
        ),
        (
            lambda d: d["job"]["worker_pools"][0].update(acelerator_type="X"),
            "did you mean 'accelerator_type'",
        ),
        (
            lambda d: d["job"]["worker_pools"][0].update(
                accelerator_type="NVIDIA_TESLA_T4", accelerator_count=0
            ),
            "accelerator_count: must be >= 1",
        ),
        (
            lambda d: d["job"]["worker_pools"][0].update(
                accelerator_type="nvidia t4", accelerator_count=1
            ),
            "unknown accelerator 'NVIDIA T4'",
        ),
        (
            lambda d: d["job"].update(
                tensorboard="projects/p/locations/us-central1/tensorboards/1"
            ),
            "needs a service account",
        ),
        (
            lambda d: d["job"].update(
                tensorboard="projects/p/locations/europe-west4/tensorboards/1",
                service_account="sa@p.iam.gserviceaccount.com",
            ),
            "is in europe-west4 but jobs run in region us-central1",
        ),
        (
            lambda d: d["image"].update(registry_host="europe-west4-docker.pkg.dev"),
            "the registry is in europe-west4",
        ),
        (
            lambda d: d["hpt"]["metric"].update(goal="up"),
            "hpt.metric.goal: expected one of maximize, minimize",
        ),
        (
            lambda d: d["hpt"]["parameters"].update(lr={"type": "double", "min": 1, "max": 0.1}),
            "min (1) must be less than max (0.1)",
        ),
        (
            lambda d: d["hpt"]["parameters"].update(bs={"type": "discrete", "values": [64, 32]}),
            "distinct and increasing",
        ),
        (lambda d: d["hpt"].update(parallel_trial_count=99), "must not exceed max_trial_count"),
        (lambda d: d["job"]["scheduling"].update(spot="yes"), "expected true or false"),
        (
            lambda d: d["hpt"].update(early_stopping="soon"),
            "hpt.early_stopping: expected one of none, median",
        ),
        (
            lambda d: d["job"]["worker_pools"][0].update(A100, accelerator_count=2),
            "worker_pools[0].accelerator_count: a partitioned GPU pool has accelerator_count 1",
        ),
        (
            lambda d: d["job"]["worker_pools"][0].update(A100, gpu_partition_size="1g.18gb"),
            "'1g.18gb' is not a MIG size of NVIDIA_TESLA_A100: 1g.5gb, 1g.10gb, 2g.10gb",
        ),
        (
            lambda d: d["job"]["worker_pools"][0].update(gpu_partition_size="1g.10gb"),
            "has no MIG partitions (GPUs with them: NVIDIA_TESLA_A100",
        ),
        (
            lambda d: d["job"]["worker_pools"][0].update(nfs_mounts=[NFS]),
            "worker_pools[0].nfs_mounts: NFS and Lustre shares are reached through the "
            "job's VPC: set job.network",
        ),
        (
            lambda d: d["job"]["worker_pools"][0].update(nfs_mounts=[{**NFS, "path": "data"}]),
            "nfs_mounts[0].path: the exported path, starting with /",
        ),
        (
            lambda d: d["job"]["worker_pools"][0].update(lustre_mounts=[{"mount_point": "x"}]),
            "lustre_mounts[0].instance_ip: required for a Managed Lustre mount",
        ),
        (
            lambda d: d["job"]["worker_pools"][0].update(machine_type="ct6e-standard-4t"),
            "worker_pools[0].machine_type: TPU v6e (Trillium) and TPU7x (Ironwood) are not "
            "offered by Vertex AI custom training: they run on GKE",
        ),
    ],
)
def test_each_problem_is_one_line_naming_the_key(change, expected):
    data = real_values(RAW)
    if data.get("region") != "us-central1":
        data["region"] = "us-central1"
        data["image"]["registry_host"] = "us-central1-docker.pkg.dev"
    change(data)
    found = problems(data)
    assert any(expected in line for line in found), found
    assert all("\n" not in line and line.startswith("vertex.yaml: ") for line in found)


def test_grid_search_rejects_continuous_parameters():
    data = real_values(RAW)
    data["hpt"]["algorithm"] = "grid"
    data["hpt"]["parameters"] = {"lr": {"type": "double", "min": 0.1, "max": 0.2}}
    assert any("grid search" in line for line in problems(data))


def test_every_problem_is_reported_at_once():
    data = real_values(RAW)
    data["staging_bucket"] = "bucket"
    data["image"]["name"] = ""
    data["job"]["bogus"] = 1
    assert len(problems(data)) >= 3


def test_worker_pools_for_local_run_and_submit():
    data = real_values(RAW)
    chief = data["job"]["worker_pools"][0]
    data["job"]["worker_pools"] = [chief, {**chief, "replica_count": 2}, {}, None]
    data["job"]["env"] = {"FOO": "bar"}
    cfg = parse(data)
    pools = cfg.job.worker_pools
    assert [p.replica_count for p in pools] == [1, 2, 0, 0]
    assert pools[2].empty and not pools[1].empty
    assert cfg.chief == pools[0]
    assert cfg.job.env == {"FOO": "bar"}
    data["job"]["worker_pools"] = [{}]
    assert any("primary pool" in line for line in problems(data))


def test_placeholders_are_found_anywhere():
    data = real_values(RAW)
    data["job"]["service_account"] = "trainer@PROJECT.iam.gserviceaccount.com"
    found = parse(data).placeholders()
    assert len(found) == 1 and "job.service_account" in found[0]


def test_unreadable_or_broken_files_are_one_line(tmp_path):
    with pytest.raises(ToolError, match="cannot read it"):
        config_lib.load(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("project: [unclosed\n")
    with pytest.raises(ToolError, match="is not valid YAML"):
        config_lib.load(broken)


# --- the declared schema: located lines, duplicate keys, types ------------------------------


def write(tmp_path: Path, data: dict, extra: str = "") -> Path:
    path = tmp_path / "vertex.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False) + extra)
    return path


def line_number(path: Path, needle: str, occurrence: int = 1) -> int:
    """The 1-based line of the ``occurrence``-th line containing ``needle``, read independently."""
    hits = [n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line]
    return hits[occurrence - 1]


def load_problems(path: Path) -> list[str]:
    with pytest.raises(ToolError) as caught:
        config_lib.load(path)
    return caught.value.lines


def test_a_primary_pool_of_several_replicas_is_one_located_line(tmp_path):
    data = real_values(RAW)
    data["job"]["worker_pools"][0]["replica_count"] = 3
    path = write(tmp_path, data)
    (line,) = load_problems(path)
    where = line_number(path, "replica_count: 3")
    assert line == (
        f"{path}:{where}: job.worker_pools[0].replica_count: must be 1 for the primary pool "
        "(e.g. 1): more replicas go to worker_pools[1]"
    )


A100 = {
    "machine_type": "a2-highgpu-1g",
    "accelerator_type": "NVIDIA_TESLA_A100",
    "accelerator_count": 1,
    "gpu_partition_size": "1g.10gb",
}
NFS = {"server": "10.0.0.2", "path": "/exports/data", "mount_point": "data"}
LUSTRE = {
    "instance_ip": "10.0.0.3",
    "volume_handle": "p/us-central1-a/lustre",
    "filesystem": "lustrefs",
    "mount_point": "data",  # /mnt/lustre/data: beside /mnt/nfs/data
}


def test_gpu_partitions_and_shared_file_systems_reach_the_request():
    from google.cloud import aiplatform_v1

    from vertex_trainer_tools import render

    data = real_values(RAW)
    data["job"]["worker_pools"][0].update(A100, nfs_mounts=[NFS], lustre_mounts=[LUSTRE])
    data["job"]["network"] = "projects/123456789012/global/networks/default"
    cfg = parse(data)
    (spec,) = render.worker_pool_specs(cfg, "us-docker.pkg.dev/p/r/i:t", [])
    pool = aiplatform_v1.WorkerPoolSpec(spec)  # the API's own message: no unknown field
    assert pool.machine_spec.gpu_partition_size == "1g.10gb"
    assert [m.mount_point for m in pool.nfs_mounts] == ["data"]
    assert pool.lustre_mounts[0].filesystem == "lustrefs"


def test_duplicate_keys_are_refused_with_both_lines(tmp_path):
    data = real_values(RAW)
    path = write(tmp_path, data, extra="region: europe-west4\n")
    (line,) = load_problems(path)
    first, second = line_number(path, "region: "), line_number(path, "region: europe-west4")
    assert (
        line == f"{path}:{second}: region: duplicate key (also on line {first}): keep one of them"
    )
    # Two study parameters with one id: the same check, inside hpt.parameters.
    pid = next(iter(RAW["hpt"]["parameters"]))
    text = (PROJECT / "vertex.yaml").read_text()
    original = next(ln for ln in text.splitlines() if ln.strip().startswith(f"{pid}:"))
    path.write_text(text.replace(original, original + "\n" + original))
    found = load_problems(path)
    assert len(found) == 1 and f": hpt.parameters.{pid}: duplicate key (also on line" in found[0]
    # Flow style too, where both keys share a line.
    path.write_text(text.replace(original, "    " + pid + ": {type: double, type: integer}"))
    found = load_problems(path)
    assert len(found) == 1 and f": hpt.parameters.{pid}.type: duplicate key" in found[0]


def test_unknown_keys_and_wrong_types_are_all_reported_at_once(tmp_path):
    data = real_values(RAW)
    data["job"]["scheduling"]["timout_seconds"] = 60
    data["job"]["worker_pools"][0]["accelerator_count"] = "two"
    data["hpt"]["max_trial_count"] = [8]
    found = load_problems(write(tmp_path, data))
    assert len(found) == 3, found
    assert any(
        "job.scheduling.timout_seconds: unknown key (did you mean 'timeout_seconds'" in p
        for p in found
    )
    assert any(
        "job.worker_pools[0].accelerator_count: expected an integer, got 'two'" in p for p in found
    )
    assert any("hpt.max_trial_count: expected an integer, got [8]" in p for p in found)


def test_a_metric_id_with_spaces_is_refused():
    data = real_values(RAW)
    data["hpt"]["metric"]["id"] = "val accuracy"
    assert any("hpt.metric.id: 'val accuracy' has spaces" in line for line in problems(data))


# --- cost levers: scheduling strategy, max wait, Reduction Server -----------------------------


def gpu_pool(data: dict, **changes) -> dict:
    pool = {**data["job"]["worker_pools"][0], "accelerator_type": "NVIDIA_L4"}
    pool.update(accelerator_count=1, machine_type="g2-standard-8")
    return {**pool, **changes}


def test_scheduling_strategy_max_wait_and_the_old_spot_flag():
    data = real_values(RAW)
    data["job"]["worker_pools"] = [gpu_pool(data)]
    data["job"]["scheduling"].update(strategy="flex_start", max_wait="3600s")
    scheduling = parse(data).job.scheduling
    assert (scheduling.strategy, scheduling.max_wait) == ("FLEX_START", 3600)
    data["job"]["scheduling"].update(max_wait=7200)
    assert parse(data).job.scheduling.max_wait == 7200
    data["job"]["scheduling"].update(strategy="STANDARD")
    assert any("job.scheduling.max_wait: only strategy FLEX_START" in p for p in problems(data))
    data["job"]["scheduling"] = {"spot": True}  # a vertex.yaml written before `strategy`
    assert parse(data).job.scheduling.strategy == "SPOT"
    data["job"]["scheduling"] = {"spot": True, "strategy": "STANDARD"}
    assert any("job.scheduling.spot: true is the old spelling" in p for p in problems(data))
    data["job"]["scheduling"] = {"strategy": "SPOTT"}
    assert any("expected one of STANDARD, SPOT, FLEX_START" in p for p in problems(data))
    data["job"]["scheduling"] = {"strategy": "FLEX_START", "max_wait": "an hour"}
    assert any('max_wait: expected seconds as an integer or "<N>s"' in p for p in problems(data))


def test_flex_start_has_the_requirements_of_dynamic_workload_scheduler():
    data = real_values(RAW)
    data["job"]["scheduling"].update(strategy="FLEX_START", timeout_seconds=8 * 86400)
    data["job"]["worker_pools"] = [gpu_pool(data), gpu_pool(data, replica_count=2)]
    assert parse({**data, "job": {**data["job"], "scheduling": {"strategy": "FLEX_START"}}})
    found = problems(data)
    assert len(found) == 1 and "timeout_seconds: FLEX_START jobs run 7 days at most" in found[0]
    data["job"]["scheduling"]["timeout_seconds"] = 3600
    data["job"]["worker_pools"][1]["machine_type"] = "g2-standard-12"
    assert any("needs one machine configuration for every worker pool" in p for p in problems(data))
    cpu_only = {"accelerator_count": 0, "accelerator_type": "", "machine_type": "n1-standard-8"}
    data["job"]["worker_pools"] = [gpu_pool(data, **cpu_only)]
    assert any("FLEX_START queues for GPUs" in p for p in problems(data))


def test_reduction_server_is_pool_2_and_needs_gpu_workers():
    data = real_values(RAW)
    chief = gpu_pool(data)
    data["job"]["worker_pools"] = [chief]
    data["job"]["reduction_server"] = {"replica_count": 2}
    assert any("job.reduction_server: speeds up the NCCL all-reduce" in p for p in problems(data))
    data["job"]["worker_pools"] = [chief, {**chief, "replica_count": 3}]
    pools = parse(data).job.all_pools
    assert [p.replica_count for p in pools] == [1, 3, 2]
    assert pools[2].image_uri == config_lib.REDUCTION_SERVER_IMAGE
    assert pools[2].machine_type == "n1-highcpu-16" and not pools[2].accelerator_count
    data["job"]["worker_pools"] = [chief, {**chief, "replica_count": 3}, chief]
    assert any("pool 2 is already worker_pools[2]" in p for p in problems(data))


# --- Vertex's names and the trainer, checked by `vertex-tools check` ---------------


def check(tmp_path: Path, data: dict, capsys) -> tuple[int, str, str]:
    """``vertex-tools check`` in-process (the SDK it reads is imported once)."""
    code = cli.main(["check", f"--config={write(tmp_path, data)}"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_check_refuses_an_accelerator_and_a_region_vertex_does_not_know(tmp_path, capsys):
    data = real_values(RAW)
    data["job"]["worker_pools"][0].update(accelerator_type="NVIDIA_FAKE", accelerator_count=1)
    data["region"] = "us-centrall1"
    data["image"]["registry_host"] = "us-docker.pkg.dev"
    code, out, err = check(tmp_path, data, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 2, lines
    accelerator, region = lines
    assert "job.worker_pools[0].accelerator_type: unknown accelerator 'NVIDIA_FAKE'" in accelerator
    assert (
        "region: 'us-centrall1' is not a Vertex AI training region (did you mean 'us-central1'"
        in region
    )
    assert len(region.partition("region: ")[2]) < 150, "a few close matches, never the whole list"


def test_check_refuses_empty_values_and_settings_that_fail_only_at_submit(tmp_path, capsys):
    data = real_values(RAW)
    data["project"] = ""
    data["job"].update(experiment="my-runs", service_account="", network="my-vpc")
    code, out, err = check(tmp_path, data, capsys)
    path = tmp_path / "vertex.yaml"
    assert code == 2 and "OK" not in out
    assert err.strip().splitlines() == [
        f"ERROR: {path}:{line_number(path, 'project:')}: project: must not be empty"
        " (e.g. my-project-123)",
        f"ERROR: {path}:{line_number(path, 'network:')}: job.network: 'my-vpc' is not a VPC"
        " network name: projects/PROJECT_NUMBER/global/networks/NAME"
        " (e.g. projects/123456789012/global/networks/my-vpc)",
    ]
    data["project"], data["job"]["network"] = "demo-project-123", ""
    code, out, err = check(tmp_path, data, capsys)
    assert code == 2
    assert err.strip().splitlines() == [
        f"ERROR: {path}:{line_number(path, 'service_account:')}: job.service_account: Vertex AI"
        " Experiments need a service account (e.g. trainer@PROJECT.iam.gserviceaccount.com)"
    ]


def test_the_copies_of_vertex_names_equal_the_sdk():
    aiplatform_v1 = pytest.importorskip("google.cloud.aiplatform_v1")
    base = importlib.import_module("google.cloud.aiplatform.constants.base")
    names = importlib.import_module("vertex_trainer_tools.gcp_names")
    assert list(names.ACCELERATOR_TYPES) == [m.name for m in aiplatform_v1.AcceleratorType]
    assert set(names.REGIONS) == set(base.SUPPORTED_REGIONS) - {"global"}


def test_study_parameters_must_be_trainer_flags_and_the_metric_what_it_reports(tmp_path, capsys):
    data = real_values(RAW)
    parameters = data["hpt"]["parameters"]
    pid = next(iter(parameters))
    typo = pid + pid[-1]  # e.g. etaa
    parameters[typo] = parameters.pop(pid)
    data["hpt"]["metric"]["id"] = "not_the_metric"
    code, out, err = check(tmp_path, data, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 2, lines
    assert f"hpt.parameters.{typo}: not a flag of the trainer" in lines[0]
    assert f"(did you mean '{pid.replace('-', '_')}'" in lines[0]
    preflight = importlib.import_module("vertex_trainer_tools.preflight")
    metric, goal = preflight.reported_metric(data["job"]["args"])
    assert f"hpt.metric.id: the trainer reports {metric!r} ({goal})" in lines[1]
    assert out == ""
    assert check(tmp_path, real_values(RAW), capsys)[0] == 0


def test_the_checks_read_the_trainer_without_importing_its_framework():
    code = (
        "import sys; from vertex_trainer_tools import config, preflight\n"
        "cfg = config.load('vertex.yaml')\n"
        "flags = preflight.trainer_flags()\n"
        "preflight.hpt_problems(cfg.hpt, list(cfg.job.args))\n"
        "heavy = {'tensorflow', 'torch', 'xgboost', 'keras', 'transformers'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
        "assert '--seed' in flags and '--model-dir' in flags, flags\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_a_job_args_flag_the_trainer_lacks_is_refused(tmp_path, capsys):
    data = real_values(RAW)
    data["job"]["args"] = ["--seed=3", "--sede=4"]
    code, out, err = check(tmp_path, data, capsys)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "job.args: '--sede=4': the trainer has no flag --sede (did you mean 'seed'" in line


def test_a_declaration_that_is_no_trainer_spec_is_one_clear_error(tmp_path):
    preflight = importlib.import_module("vertex_trainer_tools.preflight")
    declared = tmp_path / "trainer" / "spec.py"
    declared.parent.mkdir()
    (declared.parent / "__init__.py").write_text("")
    declared.write_text("SPEC = {'metric': 'auc'}\n")
    with pytest.raises(ToolError) as refused:
        preflight.trainer_spec(tmp_path)
    assert refused.value.lines == [
        "trainer/spec.py: SPEC is not a vertex_trainer_runtime.spec.TrainerSpec"
    ]
    assert preflight.trainer_spec() is not None  # the project's own, read afresh


def test_the_flags_are_the_trainer_parsers_own():
    """Read by importing the project's framework-free trainer/spec.py, not by scanning code."""
    preflight = importlib.import_module("vertex_trainer_tools.preflight")
    flags = preflight.trainer_flags()
    assert flags["--seed"] is True and flags["--model-dir"] is True
    assert set(flags) >= {"--train-data", "--eval-data", "--job-dir", "--checkpoint-minutes"}
    assert "--help" not in flags
