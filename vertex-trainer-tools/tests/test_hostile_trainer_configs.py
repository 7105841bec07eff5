"""Every broken vertex.yaml of ``hostile_trainer_configs.yaml`` is refused by ``vertex-tools
check`` and a dry-run ``submit`` (and, where the file itself is broken, ``upload-model``) with
the one line the table names, exit 1 and no traceback; every valid one is accepted.

The tools run in-process on each variant's generated project (``xgboost`` is conftest's
``PROJECT``; Keras and PyTorch are baked once here): they import only its framework-free
``trainer/spec.py`` (its flags and metric) and ``cli.py``, so no framework is installed.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.cloud import aiplatform_v1

from conftest import PROJECT, TEMPLATE
from submit_helpers import EXECUTOR_AVAILABLE_ON, cloud_values, image_dates, parse_strict
from vertex_trainer_tools.errors import ToolError

cli = importlib.import_module("vertex_trainer_tools.cli")
config_lib = importlib.import_module("vertex_trainer_tools.config")
schema = importlib.import_module("vertex_trainer_tools.schema")
project_lib = importlib.import_module("vertex_trainer_tools.project")

TABLE = yaml.safe_load((Path(__file__).parent / "hostile_trainer_configs.yaml").read_text())
FRAMEWORKS = ("keras", "pytorch", "xgboost")
CASES = [
    pytest.param(framework, case, id=f"{framework}-{case['id']}")
    for framework in FRAMEWORKS
    for case in [*TABLE["common"], *TABLE[framework]]
]
_PROJECTS: dict[str, Path] = {}


def project(framework: str) -> Path:
    """The variant's generated project: conftest's when it is that variant, else baked once."""
    if framework == os.environ.get("VERTEX_TOOLS_TEST_FRAMEWORK", "xgboost"):
        return PROJECT
    if framework not in _PROJECTS:
        from cookiecutter.main import cookiecutter

        output = tempfile.mkdtemp(prefix=f"hostile-{framework}-")
        _PROJECTS[framework] = Path(
            cookiecutter(
                str(TEMPLATE),
                no_input=True,
                output_dir=output,
                default_config=True,
                extra_context={"framework": framework},
            )
        )
    return _PROJECTS[framework]


@pytest.fixture(scope="module", autouse=True)
def _remove_baked_projects():
    yield
    for folder in _PROJECTS.values():
        shutil.rmtree(folder.parent, ignore_errors=True)


def assign(data: Any, key: str, value: Any) -> None:
    """``data[key] = value`` for a dotted key; an index one past a list's end appends."""
    *parents, last = schema.key_parts(key)
    for part in parents:
        data = data[part]
    if isinstance(data, list) and last == len(data):
        data.append(value)
    else:
        data[last] = value


def write_case(folder: Path, framework: str, case: dict) -> Path:
    data = cloud_values(yaml.safe_load((project(framework) / "vertex.yaml").read_text()))
    for key, value in case.get("set", {}).items():
        assign(data, key, value)
    for key in case.get("drop", []):
        *parents, last = schema.key_parts(key)
        node = data
        for part in parents:
            node = node[part]
        del node[last]
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    for old, new in case.get("text", []):
        assert old in text, f"{case['id']}: {old!r} is not in the written YAML"
        text = text.replace(old, new, 1)
    text += case.get("append", "")
    path = folder / "vertex.yaml"
    path.write_bytes(text.encode(case.get("encoding", "utf-8")))
    return path


def run(main, argv: list[str], capsys) -> tuple[int, str, str]:
    """A tool's ``main`` in-process; any exception it lets out is the traceback a user sees."""
    try:
        code = main(argv)
    except BaseException as error:  # noqa: BLE001 - SystemExit included: argparse's exits
        captured = capsys.readouterr()
        pytest.fail(f"{argv}: {type(error).__name__}: {error}\n{captured.err[-2000:]}")
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    return code, captured.out, captured.err


def refusal(result: tuple[int, str, str], expect: str, what: str) -> None:
    """The one or two ``ERROR:`` lines of a refusal (nothing else on stderr) with ``expect``."""
    code, out, err = result
    lines = err.strip().splitlines()
    assert code == 2, f"{what} accepted a broken config (exit {code}): {err or out[:500]}"
    assert 1 <= len(lines) <= 2 and all(line.startswith("ERROR: ") for line in lines), (what, err)
    assert any(expect in line for line in lines), f"{what}: {expect!r} not in {lines}"
    assert out == "", (what, out)


@pytest.fixture
def in_project(tmp_path, monkeypatch):
    """Run the tools as in the variant's project, offline, from a scratch folder."""
    for name in [n for n in os.environ if n.startswith(("GOOGLE_", "VERTEX_", "CLOUDSDK_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(image_dates, "today", lambda: EXECUTOR_AVAILABLE_ON)  # cloud_values'

    def enter(framework: str) -> None:
        monkeypatch.setenv(project_lib.PROJECT_ENV, str(project(framework)))

    return enter


@pytest.mark.parametrize(("framework", "case"), CASES)
def test_a_hostile_config(framework, case, tmp_path, in_project, capsys):
    in_project(framework)
    path = write_case(tmp_path, framework, case)
    hpt = case.get("hpt", any(key.startswith("hpt") for key in case.get("set", {})))
    submit_argv = ["--dry-run", f"--config={path}", *(["--hpt"] if hpt else [])]
    submit_argv += ["--", *map(str, case.get("args", []))]
    check = run(cli.main, ["check", f"--config={path}"], capsys)
    submit = run(cli.main, ["submit", *submit_argv], capsys)
    if case.get("accept"):
        assert check[0] == 0 and check[1].strip().endswith(": OK"), check
        assert submit[0] == 0 and "ERROR" not in submit[2], submit[2]
        request = json.loads(submit[1])
        kind = aiplatform_v1.HyperparameterTuningJob if hpt else aiplatform_v1.CustomJob
        parse_strict(kind, request)
        shown = json.dumps(request, indent=2)
        for expected in case.get("request", []):
            assert expected in shown, f"{expected} not in the request"
        return
    expect = case["expect"]
    if case.get("args"):  # ARGS are only submit's: check reads the file alone
        assert check[0] == 0, check
    else:
        refusal(check, expect, "check")
    refusal(submit, expect, "submit --dry-run")
    try:
        config_lib.load(path)
    except ToolError:  # the file itself is refused: by every command
        upload = ["upload-model", "--dry-run", f"--config={path}", "--job=outputs/local/latest"]
        refusal(run(cli.main, upload, capsys), expect, "upload-model")
        gcloud = run(cli.main, ["gcloud-config", f"--config={path}"], capsys)
        refusal(gcloud, expect, "gcloud-config")


def test_the_table_has_the_hostile_set_the_issue_asks_for():
    broken = [c for c in CASES if not c.values[1].get("accept")]
    per_variant = {fw: sum(c.values[0] == fw for c in broken) for fw in FRAMEWORKS}
    assert len(broken) >= 110 and min(per_variant.values()) >= 36, per_variant
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "case ids are unique"


def test_an_unforeseen_error_is_one_line_not_a_traceback(monkeypatch, capsys):
    """The last resort of every command (``cli.main``); a traceback with
    ``VERTEX_TOOLS_DEBUG=1``."""

    def broken(args):
        raise KeyError("something\nspanning lines")

    monkeypatch.setattr(cli, "check", broken)
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    assert cli.main(["check"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("ERROR: vertex-tools check: KeyError: 'something") and "=1 shows" in line
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    with pytest.raises(KeyError):
        cli.main(["check"])
