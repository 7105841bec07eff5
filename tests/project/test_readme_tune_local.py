"""The README's ``make tune-local`` commands, run as written in a copy of the project: a
short study of the project's own hpt section on its built-in data, then ``STUDY=latest``,
which finds every trial finished and runs none again."""

from __future__ import annotations

import json
import re
import shlex
import shutil

import pytest

from conftest import COPY_IGNORE, PROJECT, run_as_typed

pytestmark = [pytest.mark.slow]


def section_commands() -> list[str]:
    """The README's ``make tune-local`` lines (its local-run section), comments dropped."""
    text = (PROJECT / "README.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
        for line in block.splitlines():
            if line.startswith("make tune-local"):
                commands.append(shlex.join(shlex.split(line, comments=True)))
    return commands


COMMANDS = section_commands()


def test_a_short_study_and_its_resume_run_as_written(tmp_path):
    assert COMMANDS == ["make tune-local TRIALS=4 PARALLEL=2", "make tune-local STUDY=latest"]
    project = tmp_path / PROJECT.name
    shutil.copytree(PROJECT, project, ignore=COPY_IGNORE, symlinks=True)
    study = run_as_typed(COMMANDS[0], project).stdout
    folder = (project / "outputs" / "studies" / "latest").resolve()
    rows = (folder / "trials.csv").read_text(encoding="utf-8").splitlines()
    assert len(rows) == 5 and all(",SUCCEEDED," in row for row in rows[1:]), study
    best = json.loads((folder / "best.json").read_text(encoding="utf-8"))
    assert f"best: trial {best['trial']}" in study
    assert (folder / "study.png").stat().st_size > 10_000
    for trial in range(1, 5):  # each trial a local job with its <id>/ outputs and its model
        assert (folder / "trials" / str(trial) / str(trial) / "model").is_dir()
    logs = {path: path.read_text() for path in folder.glob("trials/*/log.txt")}

    again = run_as_typed(COMMANDS[1], project).stdout
    assert "4 finished trials kept" in again and "starts" not in again
    assert {path: path.read_text() for path in logs} == logs  # no trial ran again
