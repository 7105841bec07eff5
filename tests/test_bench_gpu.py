"""bench/gpu.py without a GPU: a clean skip, the peak table, and a GPU it cannot use."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import TEMPLATE

GPU_BENCH = TEMPLATE / "bench" / "gpu.py"
sys.path.insert(0, str(GPU_BENCH.parent))
import gpu  # noqa: E402 - bench/ is no package


def test_without_nvidia_smi_it_skips_writes_nothing_and_exits_0(tmp_path):
    output = tmp_path / "results-gpu.json"
    result = subprocess.run(
        [sys.executable, str(TEMPLATE / "bench" / "run.py"), "--gpu", "--output", str(output)],
        env={"PATH": str(tmp_path)},  # no nvidia-smi on it
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "no GPU: skipped (nvidia-smi not found)" in result.stdout
    assert not output.exists()


@pytest.mark.parametrize(
    ("name", "tflops", "dtype"),
    [
        ("NVIDIA H100 80GB HBM3", 989, "bf16"),
        ("NVIDIA H100 PCIe", 756, "bf16"),
        ("NVIDIA H200", 989, "bf16"),
        ("NVIDIA A100-SXM4-40GB", 312, "bf16"),
        ("NVIDIA A100 80GB PCIe", 312, "bf16"),
        ("NVIDIA L4", 121, "bf16"),
        ("Tesla T4", 65, "fp16"),
    ],
)
def test_peak_table_by_nvidia_smi_name(name, tflops, dtype):
    assert gpu.table_peak(name) | {"entry": None} == {
        "tflops": tflops,
        "dtype": dtype,
        "entry": None,
    }


@pytest.mark.parametrize(
    "name", ["NVIDIA L40S", "NVIDIA H100 NVL", "NVIDIA H200 NVL", "Tesla V100"]
)
def test_gpus_missing_from_the_table_get_no_peak(name):
    assert gpu.table_peak(name) is None


def test_a_gpu_the_interpreter_cannot_use_is_recorded_and_fails(tmp_path):
    """A fake nvidia-smi lists an H100; the fake interpreter's torch is a CPU build."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi, python = bin_dir / "nvidia-smi", bin_dir / "python"
    smi.write_text("#!/bin/sh\necho '0, NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB, 9.0'\n")
    python.write_text("#!/bin/sh\necho False 2.13.0+cpu None\n")  # answers gpu.CHECKS
    smi.chmod(0o755)
    python.chmod(0o755)
    output = tmp_path / "results-gpu.json"
    result = subprocess.run(
        [
            sys.executable,
            str(GPU_BENCH),
            "--frameworks=pytorch",
            f"--python=pytorch={python}",
            f"--output={output}",
        ],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    results = json.loads(output.read_text())
    assert results["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert results["gpus"][0]["driver_version"] == "550.54.15"
    assert results["variants"] == {}
    assert results["skipped"] == {
        "pytorch": f"torch 2.13.0+cpu in {python} cannot use CUDA (CUDA build: None)"
    }
