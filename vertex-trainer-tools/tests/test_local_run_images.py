"""``make train-local IMAGE=...``: the local runner's replicas as containers, against a fake
``docker`` that records its arguments and plays a job whose replicas exit 0 (no engine needed;
the template's image tests run the same command on a real engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import PROJECT
from vertex_trainer_tools import config as config_lib
from vertex_trainer_tools.local_run import images, launcher

LOCAL_RUN = [sys.executable, "-m", "vertex_trainer_tools", "local-run"]

IMAGE = "local/trainer:7"

# ``run`` writes the chief's hypertune metric into the folder mounted at /tmp/hypertune, as
# cloudml-hypertune in the container would; ``wait`` answers exit code 0.
FAKE_DOCKER = """#!PYTHON
import json, os, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
if args[:2] == ["image", "inspect"] and os.environ.get("FAKE_IMAGE") != args[2]:
    sys.exit("Error: No such image: " + args[2])
refused = os.environ.get("FAKE_REFUSE", "")
if refused and args[: len(refused.split())] == refused.split():
    sys.exit("Error response from daemon: " + refused + " refused by the test")
if args[:1] == ["run"]:
    volumes = [args[i + 1] for i, arg in enumerate(args) if arg == "--volume"]
    for volume in volumes:
        host, _, inside = volume.rpartition(":")
        if inside == "/tmp/hypertune" and "workerpool0-0" in host:
            with open(os.path.join(host, "output.metrics"), "w") as out:
                out.write(json.dumps({"rmse": "0.25", "global_step": "30"}) + "\\n")
if args[:1] == ["logs"]:
    print("trained")
if args[:1] == ["wait"]:
    removed = os.path.join(os.path.dirname(os.environ["FAKE_LOG"]), "removed")
    while os.environ.get("FAKE_RUNNING") and not os.path.exists(removed):
        time.sleep(0.05)  # a container that trains on until it is removed
    print(137 if os.environ.get("FAKE_RUNNING") else 0)
if args[:2] == ["container", "rm"]:
    open(os.path.join(os.path.dirname(os.environ["FAKE_LOG"]), "removed"), "w").close()
if len(args) > 1 and args[1] == "ls":
    print({"container": "c1\\nc2", "network": "n1", "volume": ""}[args[0]])
"""


@pytest.fixture
def fake_docker(tmp_path):
    script = tmp_path / "docker"
    script.write_text(FAKE_DOCKER.replace("PYTHON", sys.executable, 1))
    script.chmod(0o755)
    log = tmp_path / "calls.jsonl"
    env = {**os.environ, "DOCKER": str(script), "FAKE_LOG": str(log), "FAKE_IMAGE": IMAGE}

    def run(*args: str) -> subprocess.CompletedProcess:
        command = [*LOCAL_RUN, f"--jobs-root={tmp_path / 'jobs'}"]
        return subprocess.run(
            [*command, *args], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120
        )

    def calls() -> list[list[str]]:
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    run.env = env
    return run, calls


def values(command: list[str], option: str) -> list[str]:
    return [command[i + 1] for i, arg in enumerate(command) if arg == option]


def test_replicas_run_as_containers_with_the_container_side_vertex_env(fake_docker, tmp_path):
    run, calls = fake_docker
    result = run(f"--image={IMAGE}", "--replicas=2", "--", "--num-boost-round=3")
    assert result.returncode == 0, result.stdout + result.stderr
    folder = (tmp_path / "jobs" / "latest").resolve()
    cfg = config_lib.load(str(PROJECT / "vertex.yaml"))
    bucket_path = cfg.base_output_dir.removeprefix("gs://")
    inside = f"/gcs/{bucket_path}/{folder.name}"

    made = calls()
    (network,) = [call for call in made if call[:2] == ["network", "create"]]
    run_id = network[-1].removeprefix("vt-")
    assert network == ["network", "create", "--label", f"vertex-trainer.run={run_id}", network[-1]]
    starts = {values(call, "--hostname")[0]: call for call in made if call[:1] == ["run"]}
    assert sorted(starts) == ["workerpool0-0", "workerpool1-0"]
    pools = {"workerpool0": ["workerpool0-0:2222"], "workerpool1": ["workerpool1-0:2222"]}
    for rank, (name, call) in enumerate(sorted(starts.items())):
        assert values(call, "--name") == [f"vt-{run_id}-{name}"]
        assert values(call, "--network") == [f"vt-{run_id}"]
        assert values(call, "--network-alias") == [name]
        assert values(call, "--label") == [f"vertex-trainer.run={run_id}"]
        assert values(call, "--volume") == [
            f"{folder}:{inside}",
            f"{folder / 'hypertune' / name}:/tmp/hypertune",
        ]
        env = dict(value.split("=", 1) for value in values(call, "--env"))
        assert env["AIP_MODEL_DIR"] == f"{inside}/model/"
        assert env["AIP_CHECKPOINT_DIR"] == f"{inside}/checkpoints/"
        spec = json.loads(env["CLUSTER_SPEC"])
        assert spec["cluster"] == pools and spec["task"]["index"] == 0
        assert json.loads(env["TF_CONFIG"])["cluster"]["chief"] == ["workerpool0-0:2222"]
        assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["RANK"]) == (
            "workerpool0-0",
            "2222",
            str(rank),
        )
        assert not {"TMPDIR", "CLOUD_ML_HP_METRIC_FILE", "PATH"} & set(env), "host-only values"
        assert call[-2:] == [IMAGE, "--num-boost-round=3"]
        assert "--gpus" not in call
    assert "workerpool0-0 | trained" in result.stdout
    assert "last metric the chief reported: rmse=0.25 at step 30" in result.stdout
    label = ["--filter", f"label=vertex-trainer.run={run_id}"]
    for kind in ("container", "network", "volume"):
        assert any(call[0] == kind and call[-2:] == label for call in made if len(call) > 3)
    assert ["container", "rm", "--force", "--volumes", "c1", "c2"] in made
    assert ["network", "rm", "n1"] in made


def test_the_test_hooks_are_mounted_read_only_and_last_on_the_python_path(fake_docker, tmp_path):
    run, calls = fake_docker
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    run.env[launcher.HOOKS_ENV] = str(hooks)
    result = run(f"--image={IMAGE}", "--", "--num-boost-round=3")
    assert result.returncode == 0, result.stdout + result.stderr
    (call,) = [call for call in calls() if call[:1] == ["run"]]
    assert f"{hooks}:{images.HOOKS_DIR}:ro" in values(call, "--volume")
    env = dict(value.split("=", 1) for value in values(call, "--env"))
    assert env["PYTHONPATH"] == images.HOOKS_DIR


def test_gpus_reach_every_container_and_only_containers(fake_docker, tmp_path):
    """`make train-local IMAGE=1 GPUS=all`: docker run --gpus all for each replica."""
    printed = subprocess.run(
        ["make", "-n", "--no-print-directory", "train-local", "IMAGE=1", "GPUS=all"],
        cwd=PROJECT,
        env={k: v for k, v in os.environ.items() if not k.startswith("MAKE")},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    words = printed.replace("\\\n", " ").split()
    assert words[words.index("--image") + 1] == "--gpus=all"
    run, calls = fake_docker
    result = run(f"--image={IMAGE}", "--replicas=2", "--gpus=all")
    assert result.returncode == 0, result.stdout + result.stderr
    starts = [call for call in calls() if call[:1] == ["run"]]
    assert [values(call, "--gpus") for call in starts] == [["all"], ["all"]]

    result = run("--gpus=all")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "ERROR: --gpus (GPUS=) is for container runs (--image, IMAGE=1); "
        "a replica run as a process sees this machine's GPUs already"
    )


def test_a_missing_image_is_one_line_and_starts_nothing(fake_docker, tmp_path):
    run, calls = fake_docker
    result = run("--image=local/none:1")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "ERROR: no image local/none:1: run make build (BASE_IMAGE=... offline)"
    )
    assert [call[:2] for call in calls()] == [["image", "inspect"]]
    assert not (tmp_path / "jobs").exists(), "no job folder for a job that never ran"


@pytest.mark.parametrize(
    ("refused", "line"),
    [
        ("network create", "ERROR: Docker: cannot create the job's network (docker network"),
        ("run", "ERROR: Docker: cannot start the container of workerpool0-0 (docker run)"),
    ],
)
def test_a_docker_refusal_is_one_line_that_says_what_docker_refused(
    fake_docker, tmp_path, refused, line
):
    run, calls = fake_docker
    run.env["FAKE_REFUSE"] = refused
    result = run(f"--image={IMAGE}")
    assert result.returncode == 1, result.stderr
    errors = [text for text in result.stderr.splitlines() if text.startswith("ERROR:")]
    (error,) = errors
    assert error.startswith(line), error
    assert error.endswith(f": Error response from daemon: {refused} refused by the test"), error
    assert "Traceback" not in result.stderr and "a bug of" not in result.stderr
    record = tmp_path / "jobs" / "latest" / "local_run.json"
    assert json.loads(record.read_text())["state"] == "FAILED", "not left RUNNING"
    assert ["network", "rm"] in [call[:2] for call in calls()] or refused == "network create"


def test_a_runner_killed_outright_leaves_no_container_running(fake_docker, tmp_path):
    """SIGKILL (the OOM killer, kill -9) skips the runner's clean-up; its guard removes the
    containers and the network instead, and stays out of the way of a runner that ends well."""
    run, calls = fake_docker
    assert run(f"--image={IMAGE}").returncode == 0
    assert [call[:2] for call in calls()].count(["container", "ls"]) == 1, "only the runner's"

    (tmp_path / "calls.jsonl").unlink()
    env = {**run.env, "FAKE_RUNNING": "1"}
    command = [*LOCAL_RUN, f"--jobs-root={tmp_path / 'jobs'}"]
    with open(tmp_path / "runner.err", "w") as errors:
        runner = subprocess.Popen(
            [*command, f"--image={IMAGE}", "--replicas=2"],
            cwd=PROJECT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            start_new_session=True,
        )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len([c for c in calls() if c[:1] == ["run"]]) < 2:
        time.sleep(0.1)
    runner.kill()
    runner.wait()
    said = tmp_path / "runner.err"  # the guard's line comes once its clean-up is over
    while time.monotonic() < deadline and not said.read_text().endswith("\n"):
        time.sleep(0.1)
    made = calls()
    assert ["container", "rm", "--force", "--volumes", "c1", "c2"] in made
    assert ["network", "rm", "n1"] in made
    (network,) = [call for call in made if call[:2] == ["network", "create"]]
    assert said.read_text().strip() == (
        f"containers: the process that ran {network[-1]}-* was killed; "
        "removed 2 container(s) and the network"
    )


def test_default_image_is_the_tag_make_build_gives():
    cfg = config_lib.load(str(PROJECT / "vertex.yaml"))
    assert images.default_image(cfg) == cfg.image_uri_with_tag("latest")
    assert images.container_output_dir("gs://b/runs", "/x/job-1") == "/gcs/b/runs/job-1"
