"""The tools' tests run against a real project: the template beside this package, baked once
per test process with its defaults into a temporary folder (``PROJECT``).

A project's ``trainer/`` is framework-free where the tools read it (flags, the metric, the
checkpoint protocol), so no framework is installed for these tests; the emulator's own tests
use a stand-in trainer (``fake_trainer.py``, installed by ``install_fake_trainer``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from vertex_trainer_tools.project import PROJECT_ENV

TEMPLATE = Path(__file__).resolve().parents[2]


def bake_project() -> Path:
    from cookiecutter.main import cookiecutter

    output = Path(tempfile.mkdtemp(prefix="vertex-tools-tests-"))
    atexit.register(shutil.rmtree, output, ignore_errors=True)
    framework = os.environ.get("VERTEX_TOOLS_TEST_FRAMEWORK", "xgboost")
    return Path(
        cookiecutter(
            str(TEMPLATE),
            no_input=True,
            output_dir=str(output),
            default_config=True,
            extra_context={"framework": framework},
        )
    )


PROJECT = bake_project()
os.environ[PROJECT_ENV] = str(PROJECT)  # the tools' project when a test runs them in-process
if str(PROJECT) not in sys.path:  # the project's framework-free trainer modules
    sys.path.insert(0, str(PROJECT))


def install_fake_trainer(tmp_path: Path, monkeypatch) -> Path:
    """Make ``fake_trainer.py`` importable by the replicas as ``fake_trainer`` (a copy in
    ``tmp_path``, the replicas' only PYTHONPATH); return the folder it records in."""
    shutil.copy(Path(__file__).with_name("fake_trainer.py"), tmp_path / "fake_trainer.py")
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return state
