"""The same mistake ends every ``vertex-tools`` command the same way: one ``ERROR:`` line and the
same exit code (``errors.py``): 2 for a mistake in what the command was given (a flag,
vertex.yaml, a value still a placeholder), 1 for a failure outside it (no credentials, no
docker or gcloud to run). In-process, on one project copy: nothing here reaches a network.
"""

from __future__ import annotations

import pytest

from submit_helpers import RAW, cloud_values, project_copy, write_config
from vertex_trainer_tools import cli, errors
from vertex_trainer_tools import lock as lock_lib

CONFIG_COMMANDS = [
    ["check"],
    ["get", "image_uri"],
    ["show"],
    ["local-run", "--print-env"],
    ["tune-local", "--trials=1"],
    ["submit", "--dry-run"],
    ["submit-hpt", "--dry-run"],
    ["gcloud-config"],
    ["upload-model", "--dry-run"],
    ["build", "--dry-run"],
    ["push", "--dry-run"],
    ["build-push", "--dry-run"],
    ["gcp-setup", "--dry-run"],
    ["report"],
]
EVERY_COMMAND = [
    *CONFIG_COMMANDS,
    ["base-image", "--print-tag"],
    ["predict-local", "--instances=request.json"],
]
MISSING = "no-such-file.yaml"

# (class of mistake, the command and its arguments, the start of the one ERROR: line, exit code)
TABLE = [
    *[
        ("config file missing", [*argv, f"--config={MISSING}"], f"{MISSING}: cannot read", 2)
        for argv in CONFIG_COMMANDS
    ],
    *[
        ("key written twice", [*argv, "--config=twice.yaml"], "twice.yaml:2: project: ", 2)
        for argv in CONFIG_COMMANDS
    ],
    *[
        ("option it lacks", [*argv, "--no-such-option"], "unrecognized arguments: --no", 2)
        for argv in EVERY_COMMAND
    ],
    *[
        ("bad flag value", [name, "--dry-run", "--tag=bad tag!"], "--tag (TAG=): 'bad tag!'", 2)
        for name in ("submit", "submit-hpt", "gcloud-config", "build", "push", "build-push")
    ],
    ("bad flag value", ["local-run", "--replicas=0"], "argument --replicas: expected", 2),
    ("bad flag value", ["tune-local", "--parallel=0"], "--parallel (PARALLEL=) must be 1", 2),
    ("bad flag value", ["tune-local", "--study=nowhere"], "--study: nowhere is not a study", 2),
    ("bad flag value", ["upload-model", "--metric=high"], "argument --metric: invalid", 2),
    ("bad flag value", ["predict-local", "--instances="], "--instances: no request file", 2),
    *[
        ("placeholder left", argv, "vertex.yaml: image.tag: 'TODO' is a placeholder", 2)
        for argv in (["check"], ["submit"], ["upload-model"], ["build"], ["gcp-setup"])
    ],
    *[
        ("no credentials", argv, "no Google Cloud credentials found", 1)
        for argv in (["submit", "--skip-remote-checks"], ["upload-model"])
    ],
    ("tool missing", ["build", "--cloud-build"], "cannot run /no/gcloud", 1),
    ("tool missing", ["build-push", "--cloud-build"], "cannot run /no/gcloud", 1),
    ("tool missing", ["gcp-setup"], "cannot run /no/gcloud", 1),
    ("tool missing", ["base-image", "--tag=t"], "base-image: /no/docker: no Docker engine", 1),
]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    copied = project_copy(tmp_path_factory.mktemp("cli"))
    (copied / "twice.yaml").write_text("project: a\nproject: b\n")
    (copied / "outputs" / "local" / "job" / "model").mkdir(parents=True)
    (copied / "outputs" / "local" / "job" / "model" / "model.bst").write_text("{}")
    (copied / "outputs" / "local" / "latest").symlink_to("job")
    digest = lock_lib.requirements_hash(copied)  # as `make lock` leaves it (test_lock.py)
    (copied / lock_lib.LOCK).write_text(f"# python: 3.10\n# requirements.txt sha256: {digest}\n")
    return copied


@pytest.fixture
def tools(project, tmp_path, monkeypatch, capsys):
    """``vertex-tools ARGV`` in the project copy, offline: (exit code, its ERROR: lines)."""
    for name in ("VERTEX_API_ENDPOINT", "CLOUDSDK_CONFIG", "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("DOCKER", "/no/docker")
    monkeypatch.setenv("GCLOUD", "/no/gcloud")
    monkeypatch.chdir(project)

    def run(argv: list[str], placeholder: bool) -> tuple[int, list[str], str]:
        data = cloud_values(RAW)
        data["model"] = {"serving_image": "us-docker.pkg.dev/vertex-ai/prediction/xgboost-cpu.2-1"}
        if placeholder:
            data["image"] = {**data["image"], "tag": "TODO"}
        write_config(project, data)
        code = cli.main(argv)
        err = capsys.readouterr().err
        assert "Traceback" not in err, err
        return code, [line for line in err.splitlines() if line.startswith("ERROR:")], err

    return run


@pytest.mark.parametrize(
    ("mistake", "argv", "line", "code"),
    TABLE,
    ids=[f"{row[0]}: {' '.join(row[1])}" for row in TABLE],
)
def test_the_same_mistake_ends_every_command_the_same_way(tools, mistake, argv, line, code):
    status, lines, err = tools(argv, placeholder=mistake == "placeholder left")
    assert status == code, err
    assert len(lines) == 1 and lines[0].startswith(f"ERROR: {line}"), err


def test_the_exit_codes_are_argparse_s():
    assert (errors.USAGE, errors.FAILED) == (2, 1)
    assert cli.main(["--no-such-option"]) == errors.USAGE
    assert cli.main(["no-such-command"]) == errors.USAGE
    assert cli.main(["--help"]) == 0 and cli.main([]) == errors.USAGE


def test_shared_options_are_declared_once(capsys):
    """``--config`` is one parent parser's option, on every command that reads vertex.yaml."""
    parser = cli.build_parser()
    configs = {
        name: action
        for name, command in parser.commands.items()
        for action in command._actions
        if "--config" in action.option_strings
    }
    assert sorted(configs) == sorted({argv[0] for argv in CONFIG_COMMANDS})
    assert len({id(action) for action in configs.values()}) == 1
