"""The runtime's framework subpackages (``vertex_trainer_runtime.keras``, ``.torch``,
``.xgboost``) tested in a venv of their own per framework, as ``make test-runtime
FRAMEWORK=<variant>`` gives a developer: the runtime, pytest and the framework's packages
(``vertex-trainer-runtime/tests/requirements/<framework>.txt``). In the template's own venv
those tests skip; here a skip of them fails (the runtime conftest's ``--framework``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FRAMEWORKS, ONE_THREAD, TEMPLATE, pip_env


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_runtimes_framework_tests_pass_in_their_own_venv(tmp_path, framework):
    command = ["make", "--no-print-directory", "test-runtime", f"FRAMEWORK={framework}"]
    command += [f"VENV={Path(sys.prefix)}", f"RUNTIME_VENV={tmp_path / 'venv'}"]
    result = subprocess.run(
        command,
        cwd=TEMPLATE,
        env={**pip_env(), **ONE_THREAD},
        capture_output=True,
        text=True,
        timeout=1500,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    summary = output.strip().splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary and "failed" not in summary, summary
