"""Each test starts without a job ledger: one that a test's ``context.build`` opened would
otherwise record later tests' steps and add its goodput to their Experiment runs."""

from __future__ import annotations

import pytest

from vertex_trainer_runtime import ledger


@pytest.fixture(autouse=True)
def no_job_ledger(monkeypatch):
    monkeypatch.setattr(ledger, "_current", ledger._Off())


# The framework subpackages' tests skip where their framework is missing (the core's venv).
# ``--framework=torch`` says this venv is that framework's (requirements/torch.txt): a skipped
# test of it is then a failure, not a quiet pass.
def pytest_addoption(parser):
    parser.addoption(
        "--framework",
        choices=("keras", "torch", "xgboost"),
        help="fail the tests of this framework (test_<framework>_*.py) that would skip",
    )


def _fail_a_skip_of_the_venvs_framework(config, path, report) -> None:
    framework = config.getoption("--framework")
    if framework and report.skipped and path.name.startswith(f"test_{framework}_"):
        report.outcome = "failed"
        report.longrepr = f"skipped in the {framework} venv: {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A module-level ``pytest.importorskip`` skips while the file is collected."""
    outcome = yield
    _fail_a_skip_of_the_venvs_framework(collector.config, collector.path, outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_a_skip_of_the_venvs_framework(item.config, item.path, outcome.get_result())
