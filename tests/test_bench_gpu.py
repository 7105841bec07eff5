"""bench/gpu.py without a GPU: a clean skip, the peak table, the set-up made in seconds, the
budget, results written case by case (a killed run keeps them), and the kit of wheels."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import TEMPLATE

GPU_BENCH = TEMPLATE / "bench" / "gpu.py"
sys.path.insert(0, str(GPU_BENCH.parent))
import gpu  # noqa: E402 - bench/ is no package
import gpu_setup  # noqa: E402


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
    assert results["device"] == "NVIDIA H100 80GB HBM3"
    assert results["gpus"][0]["driver_version"] == "550.54.15"
    assert results["cases"] == {}
    skipped = [r for r in results["records"] if r["kind"] == "skipped"]
    assert skipped == [
        skipped[0]
        | {
            "framework": "pytorch",
            "why": f"torch 2.13.0+cpu in {python} cannot use CUDA (CUDA build: None)",
        }
    ]


def test_vocabulary_is_bert_base_sized_with_berts_special_ids_and_the_same_every_time():
    started = time.monotonic()
    pieces = gpu_setup.vocabulary()
    assert time.monotonic() - started < 15  # seconds, not the minute training took
    assert len(pieces) == 30522 == len(set(pieces))
    assert [pieces.index(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [
        0,
        100,
        101,
        102,
        103,
    ]
    assert all(piece == piece.lower() and " " not in piece for piece in pieces[104:])
    assert gpu_setup.vocabulary() == pieces


def test_reviews_have_imdb_shaped_token_lengths_and_only_vocabulary_words(tmp_path):
    pieces, info = gpu_setup.review_files(str(tmp_path), 1000, 10)
    assert (tmp_path / "model" / "vocab.txt").read_text().splitlines() == pieces
    with (tmp_path / "train.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 1000
    known = set(pieces)
    assert all(word in known for row in rows[:200] for word in row["text"].split())
    assert {row["label"] for row in rows} == {"0", "1"}
    # IMDB under bert-base-uncased: median about 230 tokens, mean about 300, a long tail.
    assert 200 <= info["tokens_median"] <= 260
    assert 260 <= info["tokens_mean"] <= 340
    assert info["tokens_max"] > 1500
    assert gpu_setup.reviews(50, 1, pieces) == gpu_setup.reviews(50, 1, pieces)


def cases(names_and_seconds: dict, framework="pytorch") -> list[list]:
    made = {
        name: gpu.Case(name, framework, [], (0, 1), 10.0, "samples/s", seconds)
        for name, seconds in names_and_seconds.items()
    }
    return [[made["bare_512"], made["trainer_512"]], [made["bare_128"], made["trainer_128"]]]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_runs_what_fits_in_order_and_writes_after_every_case(tmp_path):
    """Processes of 40 s against a 130 s budget: three run, the fourth is skipped; the first
    pair's ratio is in the file as soon as its second case is measured."""
    clock = FakeClock()
    budget = gpu.Budget(130, clock=clock)
    journal = gpu.Journal(tmp_path / "r.json", {"device": "NVIDIA H200"})
    order = []
    window = {"bare_512": 1.0, "trainer_512": 1.25, "bare_128": 0.5, "trainer_128": 0.5}

    def measure(case, timeout):
        order.append((case.name, timeout))
        lines = (tmp_path / "r.jsonl").read_text().splitlines()
        assert len(lines) == 1 + len(order) - 1  # start record + one per case so far
        clock.now += 40
        return {"device": "NVIDIA H200", "process_s": 40.0, "window_s": window[case.name]}

    groups = cases(dict.fromkeys(window, 30.0))
    gpu.run_cases(groups, repeats=3, budget=budget, journal=journal, measure=measure)
    assert order == [("bare_512", 130), ("trainer_512", 90), ("bare_128", 50)]
    results = json.loads((tmp_path / "r.json").read_text())
    per_unit_ms = {
        name: 1000 / results["cases"][name]["median"] for name in ("bare_512", "trainer_512")
    }
    assert results["trainer_over_bare"] == {
        "512": {
            "trainer_over_bare": 0.8,
            "overhead_ms_each": round(per_unit_ms["trainer_512"] - per_unit_ms["bare_512"], 4),
            "repeats": [1, 1],
            "device": "NVIDIA H200",
        }
    }
    assert results["trainer_over_bare"]["512"]["overhead_ms_each"] > 0  # the slower trainer
    assert results["cases"]["bare_128"]["median"] == 20.0
    kinds = [r["kind"] for r in results["records"]]
    assert kinds[:4] == ["start", "case", "case", "case"]
    assert set(kinds[4:]) == {"skipped"}


def test_a_second_pass_swaps_bare_loop_and_trainer(tmp_path):
    journal = gpu.Journal(tmp_path / "r.json", {})
    order = []

    def measure(case, timeout):
        order.append(case.name)
        return {"device": "cpu", "process_s": 1.0, "window_s": 1.0}

    groups = cases(dict.fromkeys(["bare_512", "trainer_512", "bare_128", "trainer_128"], 1.0))
    gpu.run_cases(groups, repeats=2, budget=gpu.Budget(1e6), journal=journal, measure=measure)
    assert order[4:] == ["trainer_512", "bare_512", "trainer_128", "bare_128"]
    summary = journal.summary()
    assert summary["cases"]["trainer_512"]["rates"] == [10.0, 10.0]


def test_a_killed_run_keeps_the_cases_it_finished(tmp_path):
    """The third process hangs; the run is killed (SIGKILL): two cases are on disk."""
    script = tmp_path / "cut.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            sys.path.insert(0, {str(GPU_BENCH.parent)!r})
            import gpu

            def measure(case, timeout):
                if case.name == "bare_128":  # both earlier cases are written by now
                    open({str(tmp_path / "hanging")!r}, "w").close()
                    time.sleep(600)
                return {{"device": "cpu", "process_s": 1.0, "window_s": 2.0}}

            case = lambda name: gpu.Case(name, "pytorch", [], (0, 1), 10.0, "samples/s", 1.0)
            groups = [[case("bare_512"), case("trainer_512")], [case("bare_128")]]
            journal = gpu.Journal(gpu.Path({str(tmp_path / "r.json")!r}), {{"device": "cpu"}})
            gpu.run_cases(groups, 1, gpu.Budget(1e6), journal, measure)
            """
        )
    )
    process = subprocess.Popen([sys.executable, str(script)])
    lines = tmp_path / "r.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if (tmp_path / "hanging").exists():
            break
        assert process.poll() is None, "the run ended before it was killed"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    records = [json.loads(line) for line in lines.read_text().splitlines()]
    assert [r.get("case") for r in records if r["kind"] == "case"] == ["bare_512", "trainer_512"]
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["trainer_over_bare"]["512"]["trainer_over_bare"] == 1.0


def test_the_kit_downloads_exactly_its_wheels_for_the_vm_and_bakes_both_projects(
    tmp_path, monkeypatch
):
    commands, baked = [], []

    def fake_run(argv, cwd, env=None, timeout=0):
        commands.append(argv)
        (tmp_path / "kit" / "wheels" / f"{len(commands)}.whl").write_bytes(b"x" * 1024)
        return 0.0

    monkeypatch.setattr(gpu.bench, "run", fake_run)
    monkeypatch.setattr(gpu.bench, "bake", lambda fw, dest: baked.append(fw))
    assert gpu.make_kit(tmp_path / "kit") == 0
    wanted = [command[-1] for command in commands]
    runtime = str(gpu.bench.TEMPLATE / "vertex-trainer-runtime")  # the trainers' runtime, built
    assert wanted == [*gpu.KIT_WHEELS, runtime]
    assert "xgboost==3.4.1" in wanted and "datasets==5.2.0" in wanted
    for command in commands:
        assert "--no-deps" in command
        if command[3] == "download":
            assert command[command.index("--python-version") + 1] == "3.12"
            assert "manylinux_2_28_x86_64" in command
        else:  # cloudml-hypertune has only an sdist on PyPI
            assert command[3:5] == ["wheel", "--no-deps"]
    assert baked == ["pytorch", "xgboost"]
