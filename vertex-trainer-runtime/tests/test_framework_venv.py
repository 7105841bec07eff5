"""``--framework=<name>``: in that framework's venv a skipped test of it fails, so that a venv
missing a package cannot pass by skipping (``make test-runtime FRAMEWORK=...``)."""

from __future__ import annotations

from pathlib import Path

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py").read_text(encoding="utf-8")
MISSING = "import pytest\npytest.importorskip('no_such_framework')\n\ndef test_it():\n    pass\n"
SKIPPED = "import pytest\n\ndef test_it():\n    pytest.skip('no GPU')\n"


def test_a_missing_framework_fails_its_own_tests_and_skips_the_others(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_xgboost_parts=MISSING, test_keras_parts=MISSING)
    result = pytester.runpytest("-p", "no:cacheprovider", "--framework=xgboost")
    result.assert_outcomes(errors=1, skipped=1)
    result.stdout.fnmatch_lines(["*skipped in the xgboost venv*no_such_framework*"])


def test_a_test_that_skips_itself_in_its_frameworks_venv_fails(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_torch_parts=SKIPPED)
    pytester.runpytest("-p", "no:cacheprovider", "--framework=torch").assert_outcomes(failed=1)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(skipped=1)
