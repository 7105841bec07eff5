"""containers' command lines and clean-up, against a fake ``docker`` that records its
arguments (tests/test_docker_image.py runs the same functions on a real engine)."""

from __future__ import annotations

import json
import sys

import pytest

from vertex_trainer_tools import containers

FAKE_DOCKER = """#!PYTHON
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
listed = {"container": "c1\\nc2", "network": "n1", "volume": ""}
if len(args) > 1 and args[1] == "ls":
    print(listed[args[0]])
if args[:1] == ["wait"]:
    print(137)
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    script = tmp_path / "docker"
    script.write_text(FAKE_DOCKER.replace("PYTHON", sys.executable, 1))
    script.chmod(0o755)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("DOCKER", str(script))
    monkeypatch.setenv("FAKE_LOG", str(log))

    def calls() -> list[list[str]]:
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    return calls


def option_values(command: list[str], option: str) -> list[str]:
    return [command[i + 1] for i, arg in enumerate(command) if arg == option]


def test_run_command_is_a_vertex_replica(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER", "docker")
    spec = '{"cluster":{"workerpool0":["workerpool0-0:2222"]},"task":{"index":0}}'
    replica = containers.Replica(
        image="local/trainer:1",
        hostname="workerpool0-0",
        env={"CLUSTER_SPEC": spec, "AIP_MODEL_DIR": "/gcs/bucket/run/model/"},
        args=["--epochs=1"],
        gcs={"bucket": str(tmp_path / "out")},
        hypertune_dir=str(tmp_path / "hpt"),
        user="1000:1000",
    )
    command = containers.run_command(replica, "r1", "vt-r1")
    assert command[:3] == ["docker", "run", "--detach"]
    assert option_values(command, "--name") == ["vt-r1-workerpool0-0"]
    assert option_values(command, "--hostname") == ["workerpool0-0"]
    assert option_values(command, "--network-alias") == ["workerpool0-0"]
    assert option_values(command, "--network") == ["vt-r1"]
    assert option_values(command, "--label") == [f"{containers.LABEL}=r1"]
    assert option_values(command, "--volume") == [
        f"{tmp_path / 'out'}:/gcs/bucket",
        f"{tmp_path / 'hpt'}:/tmp/hypertune",
    ]
    env = option_values(command, "--env")
    assert f"CLUSTER_SPEC={spec}" in env and "AIP_MODEL_DIR=/gcs/bucket/run/model/" in env
    assert option_values(command, "--user") == ["1000:1000"] and "HOME=/tmp" in env
    assert command[-2:] == ["local/trainer:1", "--epochs=1"]
    assert "--gpus" not in command


def test_root_runs_as_root_and_gpus_are_passed(monkeypatch):
    monkeypatch.setenv("DOCKER", "docker")
    replica = containers.Replica("img", "workerpool1-0", gpus="all", user="0:0")
    command = containers.run_command(replica, "r2", "vt-r2")
    assert "--user" not in command and option_values(command, "--gpus") == ["all"]


def test_network_kill_wait_and_cleanup_commands(fake_docker):
    assert containers.create_network("r3") == "vt-r3"
    containers.kill("r3", "workerpool0-0")
    assert containers.wait("r3", "workerpool0-0") == 137
    calls = fake_docker()
    assert calls[0] == ["network", "create", "--label", f"{containers.LABEL}=r3", "vt-r3"]
    assert calls[1] == ["kill", "--signal=KILL", "vt-r3-workerpool0-0"]
    assert calls[2] == ["wait", "vt-r3-workerpool0-0"]


def test_job_cleans_up_by_label_even_after_an_error(fake_docker):
    with pytest.raises(RuntimeError), containers.job("r4") as run:
        assert run == "r4"
        raise RuntimeError("a replica failed")
    calls = fake_docker()
    label_filter = ["--filter", f"label={containers.LABEL}=r4"]
    listings = [call for call in calls if call[1] == "ls"]
    assert [call[0] for call in listings] == ["container", "network", "volume"]
    assert all(call[-2:] == label_filter for call in listings)
    assert ["container", "rm", "--force", "--volumes", "c1", "c2"] in calls
    assert ["network", "rm", "n1"] in calls
    assert not [call for call in calls if call[:2] == ["volume", "rm"]], "nothing listed"


def test_cleanup_reports_what_it_could_not_remove(fake_docker, monkeypatch):
    monkeypatch.setenv("FAKE_EXIT", "1")
    problems = containers.cleanup("r5")
    assert len(problems) == 3 and all(line.startswith("docker ") for line in problems)


def test_start_makes_the_mounted_folders(fake_docker, tmp_path):
    out, hpt = tmp_path / "out", tmp_path / "hpt"
    replica = containers.Replica(
        "img", "workerpool0-0", gcs={"b": str(out)}, hypertune_dir=str(hpt)
    )
    assert containers.start(replica, "r6", "vt-r6") == "vt-r6-workerpool0-0"
    assert out.is_dir() and hpt.is_dir(), "docker would create them owned by root"
    assert fake_docker()[0][:2] == ["run", "--detach"]
