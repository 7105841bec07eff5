"""bench/run.py's CPU harness: its options and the ratios it derives from measured runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import TEMPLATE

sys.path.insert(0, str(TEMPLATE / "bench"))
import report  # noqa: E402 - bench/ is no package
import run as bench  # noqa: E402


def test_python_option_needs_framework_equals_path():
    result = subprocess.run(
        [sys.executable, str(TEMPLATE / "bench" / "run.py"), "--python", "torch"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--python: 'torch' is not FRAMEWORK=PATH" in result.stderr


def test_extra_overhead_pairs_are_ratios_of_median_cpu_throughputs(tmp_path):
    setup = bench.pytorch_setup(tmp_path, quick=True)
    work = setup.work

    def measured(cpu_seconds: float) -> dict:
        return {
            "window_s": 2 * cpu_seconds,
            "window_cpu_s": cpu_seconds,
            "first_step_s": 1.0,
            "first_step_cpu_s": 1.0,
            "process_s": 3.0,
        }

    # Throughput = work / CPU seconds: trainer_small_bert at 1/1.25 of bare_small_bert's.
    seconds = {case.name: [1.0, 1.0, 1.0] for case in setup.cases}
    seconds["trainer_small_bert"] = [12.5, 12.5, 50.0]
    seconds["bare_small_bert"] = [10.0, 10.0, 10.0]
    seconds["trainer"] = [1.25, 1.25, 1.25]  # 0.25 CPU s more than "bare" over the window
    runs = {name: [measured(s) for s in values] for name, values in seconds.items()}
    result = bench.summarize(setup, runs)
    small = result["overheads"]["BERT with 4 layers, hidden 256"]
    assert small["ratio"] == 0.8  # medians: (work / 12.5) / (work / 10)
    assert small["range"] == [0.2, 0.8]
    assert result["cases"]["bare_small_bert"]["throughput"] == round(work / 10.0, 3)
    # The per-unit overhead over the bare loop: 0.25 CPU s spread over the window's work.
    assert result["overhead_cpu_ms_each"] == pytest.approx(250 / work, rel=0.01)
    rows = report.speedup_table({"variants": {"pytorch": result}})
    assert any("trainer ÷ bare loop: BERT with 4 layers, hidden 256 | **0.80×**" in r for r in rows)


def test_cases_on_the_short_train_file_use_their_own_window_and_work(tmp_path):
    """Full mode: tiny-BERT cases on 1,024 reviews, the 4 x 256 and 512-token ones on 256."""
    setup = bench.pytorch_setup(tmp_path, quick=False)
    cases = {case.name: case for case in setup.cases}
    assert (setup.window, setup.work) == ((64, 192), 2048)
    for name in ("trainer_small_bert", "bare_small_bert", "trainer_512", "sample_512"):
        assert (cases[name].window, cases[name].work) == ((16, 48), 512)
        argv = cases[name].argv(str(tmp_path / "job"))
        train_data = [a for a in argv if a.startswith("--train-data=")]
        assert train_data[-1] == f"--train-data={tmp_path / 'train-short.csv'}"
    assert cases["trainer"].window is None
    window = {"window_s": 2.0, "window_cpu_s": 1.0}
    assert bench.rates(setup, cases["bare_small_bert"], window) == (256.0, 512.0)
    assert bench.rates(setup, cases["bare"], window) == (1024.0, 2048.0)
