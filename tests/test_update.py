"""A baked project can be updated from a newer template version with cruft."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import TEMPLATE

GIT_ENV = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


def run(command: list[str], cwd: Path) -> str:
    env = {**os.environ, **GIT_ENV}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{command}: {result.stdout}\n{result.stderr}"
    return result.stdout


def commit_all(repo: Path, message: str) -> None:
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-q", "-m", message], repo)


CRUFT = [sys.executable, "-m", "cruft"]


def template_and_project(tmp_path: Path) -> tuple[Path, Path]:
    """A git copy of this template, and a project baked from it with cruft, committed."""
    template = tmp_path / "template"
    shutil.copytree(
        TEMPLATE,
        template,
        ignore=shutil.ignore_patterns(".git", ".venv", "build", "bench", "__pycache__", "*.pyc"),
    )
    run(["git", "init", "-q", "-b", "main"], template)
    commit_all(template, "v1")
    out = tmp_path / "out"
    run([*CRUFT, "create", str(template), "--no-input", "--output-dir", str(out)], tmp_path)
    project = out / "vertex_trainer"
    run(["git", "init", "-q", "-b", "main"], project)
    commit_all(project, "baked")
    return template, project


def test_cruft_update_brings_template_changes_into_a_baked_project(tmp_path):
    template, project = template_and_project(tmp_path)
    assert (
        json.loads((project / ".cruft.json").read_text())["context"]["cookiecutter"]["framework"]
        == "keras"
    )

    # The template gains a Makefile target; the user's own edit must survive the update.
    makefile = template / "{{cookiecutter.project_slug}}" / "Makefile"
    makefile.write_text(
        makefile.read_text() + "\nhello: ## a target from template v2\n\t@echo hi\n"
    )
    commit_all(template, "v2: add hello target")
    (project / "trainer" / "my_module.py").write_text('"""A user file."""\n')
    commit_all(project, "user change")

    run([*CRUFT, "update", "--skip-apply-ask"], project)
    assert "hello: ## a target from template v2" in (project / "Makefile").read_text()
    assert (project / "trainer" / "my_module.py").exists()
    assert not (project / "variants").exists()


def test_a_new_tools_version_reaches_a_project_as_one_changed_pin(tmp_path):
    """Version N -> N+1 where only the packages changed: the user's trainer edits stay, and the
    update is the pins in requirements-dev.txt (the tools) and requirements.txt (the runtime):
    neither package is copied into projects."""
    template, project = template_and_project(tmp_path)
    version = re.search(r"vertex-trainer-tools==(\S+)", read(project / "requirements-dev.txt"))
    assert version, "requirements-dev.txt pins the tools package"

    # The user edits the trainer; the template changes only inside the package.
    train = project / "trainer" / "train.py"
    train.write_text(read(train) + "\n# my own change\n")
    commit_all(project, "user change")
    init = template / "vertex-trainer-tools" / "src" / "vertex_trainer_tools" / "__init__.py"
    init.write_text(read(init).replace(f'"{version.group(1)}"', '"99.0.0"'))
    runtime_init = template / "vertex-trainer-runtime" / "src" / "vertex_trainer_runtime"
    runtime_init = runtime_init / "__init__.py"
    runtime_init.write_text(read(runtime_init).replace(f'"{version.group(1)}"', '"99.0.0"'))
    # The template pins the version cookiecutter.json names (_tools_version): bumped with it.
    context = template / "cookiecutter.json"
    context.write_text(read(context).replace(f'"{version.group(1)}"', '"99.0.0"'))
    cli = init.parent / "cli.py"
    cli.write_text(read(cli) + "\n# a fix in the tools\n")
    commit_all(template, "tools 99.0.0")

    run([*CRUFT, "update", "--skip-apply-ask"], project)
    changed = sorted(run(["git", "status", "--porcelain"], project).split()[1::2])
    # .cruft.json and .cookiecutter.json record the template commit the project now follows.
    expected = [".cookiecutter.json", ".cruft.json", "requirements-dev.txt", "requirements.txt"]
    assert changed == expected, changed
    assert "vertex-trainer-tools==99.0.0" in read(project / "requirements-dev.txt")
    assert "vertex-trainer-runtime==99.0.0" in read(project / "requirements.txt")
    assert "# my own change" in read(train)
    assert not (project / "vertex-trainer-tools").exists() and not (project / "tools").exists()
    assert not (project / "vertex-trainer-runtime").exists()


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")
