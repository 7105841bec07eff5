"""GPU benchmarks: BERT-base fine-tuning in bf16 and XGBoost on CUDA (``bench/run.py --gpu``).

Without an NVIDIA GPU this prints ``no GPU: skipped`` and exits 0, writing nothing. With one:

- PyTorch: samples/s of the generated trainer (``python -m trainer.task``, ``--precision=bf16``)
  and of a bare bf16 loop (bare_pytorch_gpu.py) on one GPU, fine-tuning a BERT-base-shaped
  classifier (random weights: the Hub is offline) at 128 and 512 tokens, every example padded
  to that length, 8,192 tokens per step. Model FLOPs per step = (6 x non-embedding parameters
  + 12 x layers x hidden x sequence length) x tokens (PaLM's accounting: forward and backward
  matrix products, attention scores included), as a fraction of the GPU's dense bf16 peak
  (PEAK_TFLOPS, by name) and of a matmul measured on it; ``6 x all parameters x tokens``
  is recorded too.
- XGBoost: boosting rounds/s on a generated HIGGS-like table (28 features), the trainer and a
  bare ``xgb.train`` each with ``device="cuda"`` and with CPU ``hist`` on every core.

Throughput is timed like run.py (probe.py: the start of every optimizer step or boosting round,
a window of steps after warm-up); the GPU runs asynchronously, but the CPU stalls once CUDA's
launch queue is full, so over a window of a hundred steps the step starts keep the GPU's pace.
Results go to ``results-gpu.json`` and the README's GPU section.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import run as bench  # bench/run.py: bake, data, logging and version helpers

BENCH = bench.BENCH
WORK = bench.WORK
FRAMEWORKS = ("pytorch", "xgboost")
TOKENS_PER_STEP = 8192
README_START = "<!-- bench:gpu:start -->"
README_END = "<!-- bench:gpu:end -->"

# Dense (no sparsity) peak tensor throughput in TFLOPS from the vendors' data sheets: bf16,
# or fp16 where the GPU has no bf16 (T4). Matched against nvidia-smi's name, first match wins.
PEAK_TFLOPS = [
    (r"H100.*PCIe", 756, "bf16", "H100 PCIe"),
    (r"H100.*(HBM3|SXM)", 989, "bf16", "H100 SXM"),
    (r"H200(?!.*NVL)", 989, "bf16", "H200 SXM"),
    (r"A100", 312, "bf16", "A100"),
    (r"\bL4\b", 121, "bf16", "L4"),
    (r"\bT4\b", 65, "fp16", "T4 (fp16: no bf16)"),
]


def table_peak(name: str) -> dict | None:
    for pattern, tflops, dtype, label in PEAK_TFLOPS:
        if re.search(pattern, name):
            return {"tflops": tflops, "dtype": dtype, "entry": label}
    return None


def nvidia_gpus() -> tuple[list[dict], str]:
    """The GPUs nvidia-smi lists (name, driver, memory, compute capability), or why none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return [], "nvidia-smi not found"
    fields = ["index", "name", "driver_version", "memory.total", "compute_cap"]
    for query in (fields, fields[:-1]):  # old drivers have no compute_cap field
        try:
            result = subprocess.run(
                [smi, f"--query-gpu={','.join(query)}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return [], f"nvidia-smi failed: {error}"
        if result.returncode == 0:
            rows = [line.split(", ") for line in result.stdout.splitlines() if line.strip()]
            gpus = [dict(zip(query, row, strict=False)) for row in rows]
            return gpus, "" if gpus else "nvidia-smi lists no GPU"
    return [], f"nvidia-smi failed: {(result.stderr or result.stdout).strip()[:200]}"


def ensure_gpu_venv(framework: str, project: Path) -> Path:
    """A virtual environment with the project's ``make install`` and CUDA builds: torch at
    tests/constraints.txt's version from PyPI, whose Linux x86-64 wheel is the CUDA build, and
    XGBoost swapped from ``xgboost-cpu`` to ``xgboost`` at the same version, as the project's
    GPU Dockerfile does. Rebuilt only when the requirements change."""
    venv = WORK / f"venv-{framework}-gpu"
    digest = hashlib.sha256()
    for name in ("requirements.txt", "requirements-dev.txt", "setup.py"):
        digest.update((project / name).read_bytes())
    stamp = venv / "bench-stamp"
    python = venv / "bin" / "python"
    if stamp.exists() and stamp.read_text() == digest.hexdigest():
        return python
    bench.log(f"{framework}: building {venv} (once; several minutes)")
    shutil.rmtree(venv, ignore_errors=True)
    bench.run([sys.executable, "-m", "venv", str(venv)], cwd=WORK)
    env = bench.pip_env()
    bench.run(["make", "install", f"PYTHON={python}"], cwd=project, env=env, timeout=3600)
    if framework == "xgboost":
        version = bench.versions(python).get("xgboost-cpu")
        if version:
            pip = [str(python), "-m", "pip"]
            bench.run([*pip, "uninstall", "-y", "xgboost-cpu"], cwd=project, env=env)
            bench.run([*pip, "install", f"xgboost=={version}"], cwd=project, env=env)
    stamp.write_text(digest.hexdigest())
    return python


CHECKS = {
    "pytorch": "import torch as t; print(t.cuda.is_available(), t.__version__, t.version.cuda)",
    "xgboost": "import xgboost as x; print(bool(x.build_info().get('USE_CUDA')), x.__version__)",
}


def cuda_problem(framework: str, python: Path) -> str | None:
    """Why ``python`` cannot use CUDA for ``framework``, or None."""
    result = subprocess.run(
        [str(python), "-c", CHECKS[framework]], capture_output=True, text=True, timeout=300
    )
    if result.returncode != 0:
        return f"{python}: {(result.stderr.strip().splitlines() or ['failed'])[-1]}"
    ok, *version = result.stdout.split()
    if ok == "True":
        return None
    if framework == "pytorch":
        return f"torch {version[0]} in {python} cannot use CUDA (CUDA build: {version[1]})"
    return f"xgboost {version[0]} in {python} is a CPU-only build: install the package 'xgboost'"


def measure(argv: list[str], hook: str, window: tuple[int, int], python, cwd, gpu: str) -> dict:
    """One process under probe.py: start-up, and the wall and CPU time of the step window."""
    with tempfile.TemporaryDirectory(dir=WORK, prefix="gpu-run-") as scratch:
        out = Path(scratch) / "probe.json"
        env = bench.probe_env(Path(scratch))
        env.update(
            TOKENIZERS_PARALLELISM="false",
            CUDA_VISIBLE_DEVICES=gpu,  # one GPU: the fraction of peak is per GPU
            BENCH_T0=repr(time.time()),
        )
        command = [str(python), str(BENCH / "probe.py"), hook, str(out)]
        command += [part.replace("{job_dir}", str(Path(scratch) / "job")) for part in argv]
        wall = bench.run(command, cwd=cwd, env=env, timeout=bench.RUN_TIMEOUT)
        clocks = json.loads(out.read_text()) if out.exists() else {"steps": [], "cpu": []}
    steps, cpu = clocks["steps"], clocks["cpu"]
    first, last = window
    if len(steps) <= last:
        raise RuntimeError(f"{len(steps)} steps seen, the window needs {last + 1}: {command}")
    return {
        "process_s": round(wall, 2),
        "first_step_s": round(steps[0], 2),
        "window_s": round(steps[last] - steps[first], 4),
        # CPU seconds of the process (all threads) in the window: near window_s or above it
        # means the host, not the GPU, sets the pace.
        "window_cpu_s": round(cpu[last] - cpu[first], 4),
        "steps": len(steps),
    }


def interleaved(cases: dict, repeats: int, window, python, cwd, gpu, unit_work: dict) -> dict:
    """Every case once per repeat, order reversed every other repeat; rates per case."""
    runs = {name: [] for name in cases}
    for repeat in range(repeats):
        names = list(cases) if repeat % 2 == 0 else list(reversed(cases))
        for name in names:
            hook, argv = cases[name]
            measured = measure(argv, hook, window, python, cwd, gpu)
            measured["rate"] = round(unit_work[name] / measured["window_s"], 3)
            runs[name].append(measured)
            bench.log(
                f"#{repeat + 1} {name}: {measured['rate']:.2f}/s, first step at "
                f"{measured['first_step_s']:.1f} s, process {measured['process_s']:.1f} s"
            )
    return runs


def ratio(runs: dict, a: str, b: str) -> dict:
    rates_a = [run["rate"] for run in runs[a]]
    rates_b = [run["rate"] for run in runs[b]]
    pairs = [x / y for x, y in zip(rates_a, rates_b, strict=True)]
    return {
        "ratio": round(statistics.median(rates_a) / statistics.median(rates_b), 3),
        "range": [round(min(pairs), 3), round(max(pairs), 3)],
    }


def bench_pytorch(python: Path, project: Path, quick: bool, repeats: int, gpu: str) -> dict:
    window = (10, 60) if quick else (30, 230)
    max_steps = window[1] + 5
    # One epoch holds every step at 128 tokens (batch 64): no evaluation or checkpoint inside.
    setup = bench.Setup("pytorch", max_steps * 64, 256, window, 0, "samples/s", 0)
    mode = "gpu-quick" if quick else "gpu"
    folder = WORK / f"data-pytorch-{mode}"
    data = bench.ensure_data("pytorch", python, setup, mode)
    if not (folder / "bert-base.json").exists():
        bench.log(f"pytorch: building the BERT-base-shaped model in {folder}")
        bench.run([str(python), str(BENCH / "gpu_setup.py"), "bert-base", str(folder)], cwd=WORK)
    model = json.loads((folder / "bert-base.json").read_text())
    peak = json.loads(
        subprocess.run(
            [str(python), str(BENCH / "gpu_setup.py"), "peak"],
            env=dict(os.environ, CUDA_VISIBLE_DEVICES=gpu),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    precision = "bf16" if peak["native_bf16"] else "fp16"
    cases, work = {}, {}
    for length in (128, 512):
        batch = TOKENS_PER_STEP // length
        shared = bench.flags(batch_size=batch, max_seq_length=length, max_steps=max_steps)
        shared += bench.flags(train_data=folder / "train.csv", precision=precision)
        trainer = ["-m", "trainer.task", *shared, f"--eval-data={folder / 'eval.csv'}"]
        trainer += [f"--model-name-or-path={folder / 'bert-base'}", "--pad-to-max-length"]
        trainer += ["--no-group-by-length", "--nproc-per-node=1", "--logging-steps=50"]
        cases[f"trainer_{length}"] = ("torch", [*trainer, "--job-dir={job_dir}"])
        bare = [str(BENCH / "bare_pytorch_gpu.py"), *shared, f"--model={folder / 'bert-base'}"]
        cases[f"bare_{length}"] = ("torch", bare)
        for name in (f"trainer_{length}", f"bare_{length}"):
            work[name] = (window[1] - window[0]) * batch
    runs = interleaved(cases, repeats, window, python, project, gpu, work)

    table = table_peak(peak["name"])
    measured_peak = peak["matmul_bf16_tflops" if precision == "bf16" else "matmul_fp16_tflops"]
    results = {}
    for name, measured in runs.items():
        length = int(name.rsplit("_", 1)[1])
        samples = statistics.median(run["rate"] for run in measured)
        tokens = samples * length
        attention = 12 * model["layers"] * model["hidden"] * length
        per_token = 6 * model["non_embedding_params"] + attention
        tflops = per_token * tokens / 1e12
        results[name] = {
            "samples_per_s": round(samples, 2),
            "tokens_per_s": round(tokens),
            "model_tflops": round(tflops, 1),
            "model_tflops_6n_all_params": round(6 * model["params"] * tokens / 1e12, 1),
            "fraction_of_table_peak": round(tflops / table["tflops"], 3) if table else None,
            "fraction_of_measured_matmul": round(tflops / measured_peak, 3),
            "first_step_s": statistics.median(run["first_step_s"] for run in measured),
            "runs": measured,
        }
    return {
        "versions": bench.versions(python),
        "model": model,
        "data": data,
        "precision": precision,
        "setup": {
            "repeats": repeats,
            "timed_steps": list(window),
            "tokens_per_step": TOKENS_PER_STEP,
            "batch_size": {str(n): TOKENS_PER_STEP // n for n in (128, 512)},
        },
        "peak": {"table": table, **peak},
        "cases": results,
        "trainer_vs_bare": {str(n): ratio(runs, f"trainer_{n}", f"bare_{n}") for n in (128, 512)},
    }


def bench_xgboost(python: Path, project: Path, quick: bool, repeats: int, gpu: str) -> dict:
    rows = 100_000 if quick else 1_000_000
    rounds, window = (80, (20, 70)) if quick else (160, (50, 150))
    setup = bench.Setup("xgboost", rows, rows // 100, window, 0, "rounds/s", 0)
    mode = "gpu-quick" if quick else "gpu"
    folder = WORK / f"data-xgboost-{mode}"
    data = bench.ensure_data("xgboost", python, setup, mode)
    shared = bench.flags(train_data=folder / "train.csv", max_depth=6, eta=0.1)
    shared += bench.flags(num_boost_round=rounds)
    trainer = ["-m", "trainer.task", *shared, f"--eval-data={folder / 'eval.csv'}"]
    trainer.append("--job-dir={job_dir}")
    bare = [str(BENCH / "bare_xgboost.py"), *shared]
    cases = {
        "trainer_cuda": ("xgboost", [*trainer, "--device=cuda"]),
        "trainer_cpu": ("xgboost", [*trainer, "--device=cpu"]),
        "bare_cuda": ("xgboost", [*bare, "--device=cuda"]),
        "bare_cpu": ("xgboost", [*bare, "--device=cpu"]),
    }
    work = dict.fromkeys(cases, window[1] - window[0])
    runs = interleaved(cases, repeats, window, python, project, gpu, work)
    return {
        "versions": bench.versions(python),
        "data": data,
        "setup": {"repeats": repeats, "timed_rounds": list(window), "max_depth": 6, "eta": 0.1},
        "cases": {
            name: {
                "rounds_per_s": round(statistics.median(run["rate"] for run in measured), 2),
                "first_step_s": statistics.median(run["first_step_s"] for run in measured),
                "runs": measured,
            }
            for name, measured in runs.items()
        },
        "cuda_vs_cpu": {
            "trainer": ratio(runs, "trainer_cuda", "trainer_cpu"),
            "bare": ratio(runs, "bare_cuda", "bare_cpu"),
        },
        "trainer_vs_bare_cuda": ratio(runs, "trainer_cuda", "bare_cuda"),
    }


BENCHES = {"pytorch": bench_pytorch, "xgboost": bench_xgboost}


def pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def render(results: dict) -> str:
    """The README's GPU section for ``results``."""
    gpu = results["gpus"][0]
    lines = [
        f"Measured {results['date']} on {gpu['name']} (driver {gpu['driver_version']}, "
        f"{gpu.get('memory.total', '?')}), one GPU, `{results['mode']}` mode; "
        f"{results['machine']['cores']} CPU cores ({results['machine']['cpu']}).",
        "",
    ]
    torch = results["variants"].get("pytorch")
    if torch:
        peak = torch["peak"]
        table = peak["table"]
        sheet = f"{table['tflops']} TFLOPS ({table['entry']})" if table else "not in the table"
        lines += [
            f"PyTorch, BERT-base shape, {torch['precision']}, "
            f"{torch['setup']['tokens_per_step']} tokens per step. "
            f"Peak: data sheet {sheet}; measured matmul {peak['matmul_bf16_tflops']} TFLOPS "
            f"bf16, {peak['matmul_fp16_tflops']} fp16.",
            "",
            "| Tokens | Case | Samples/s | Model TFLOPS | Of peak | Of measured matmul |",
            "|---|---|---|---|---|---|",
        ]
        for name, case in torch["cases"].items():
            kind, length = name.rsplit("_", 1)
            lines.append(
                f"| {length} | {kind} | {case['samples_per_s']:.1f} | {case['model_tflops']} | "
                f"{pct(case['fraction_of_table_peak'])} | "
                f"{pct(case['fraction_of_measured_matmul'])} |"
            )
        for length, entry in torch["trainer_vs_bare"].items():
            lines.append(
                f"\nTrainer ÷ bare loop at {length} tokens: **{entry['ratio']:.3f}×** "
                f"(repeats {entry['range'][0]:.3f}–{entry['range'][1]:.3f})."
            )
        lines.append("")
    xgb = results["variants"].get("xgboost")
    if xgb:
        cases = xgb["cases"]
        lines += [
            f"XGBoost, {xgb['data']['train_examples']:,} rows x {xgb['data']['features']} "
            "features, depth 6, rounds/s:",
            "",
            "| Case | CUDA | CPU hist (all cores) | CUDA ÷ CPU |",
            "|---|---|---|---|",
        ]
        for kind in ("trainer", "bare"):
            entry = xgb["cuda_vs_cpu"][kind]
            lines.append(
                f"| {kind} | {cases[kind + '_cuda']['rounds_per_s']:.1f} | "
                f"{cases[kind + '_cpu']['rounds_per_s']:.1f} | **{entry['ratio']:.2f}×** |"
            )
        lines.append("")
    return "\n".join(lines)


def update_readme(results: dict) -> None:
    readme = BENCH / "README.md"
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        bench.log("README.md has no GPU markers: not updated")
        return
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    readme.write_text(f"{head}{README_START}\n{render(results)}\n{README_END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and rows, 1 repeat")
    parser.add_argument("--repeats", type=int, default=None, help="default: 1 quick, 3 full")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="FRAMEWORK=PATH",
        help="use this interpreter (with the project's requirements and CUDA builds) instead of "
        "building bench/.work/venv-<framework>-gpu, e.g. pytorch=/opt/venv/bin/python",
    )
    parser.add_argument(
        "--output",
        default=None,
        help="results file (default: bench/results-gpu.json, which also updates README.md; "
        "bench/.work/quick/results-gpu.json with --quick)",
    )
    args = parser.parse_args(argv)
    frameworks = [name for name in args.frameworks.split(",") if name in FRAMEWORKS]
    gpus, why = nvidia_gpus()
    if not gpus:
        print(f"no GPU: skipped ({why}); nothing measured, nothing written")
        return 0
    for name in sorted(set(args.frameworks.split(",")) - set(FRAMEWORKS)):
        print(f"{name}: no GPU benchmark (GPU cases: {', '.join(FRAMEWORKS)})")
    interpreters = dict(item.split("=", 1) for item in args.python)
    repeats = args.repeats or (1 if args.quick else 3)
    default = WORK / "quick" / "results-gpu.json" if args.quick else BENCH / "results-gpu.json"
    output = Path(args.output) if args.output else default
    output.parent.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(exist_ok=True)
    # The first visible GPU, by the id CUDA_VISIBLE_DEVICES uses.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", gpus[0]["index"]).split(",")[0].strip()
    gpu = next((entry for entry in gpus if entry["index"] == visible), gpus[0])
    results = {
        "mode": "quick" if args.quick else "full",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": bench.machine() | {"gpu": gpu["name"]},
        "gpus": [gpu, *(entry for entry in gpus if entry is not gpu)],
        "measured_gpu": visible,
        "variants": {},
        "skipped": {},
    }
    started = time.time()
    for framework in frameworks:
        bench.log(f"{framework}: start (GPU {visible}: {gpu['name']})")
        project, _ = bench.bake(framework, WORK / f"{framework}-gpu")
        if framework in interpreters:
            python = Path(interpreters[framework])
        else:
            python = ensure_gpu_venv(framework, project)
        problem = cuda_problem(framework, python)
        if problem:
            bench.log(f"{framework}: skipped: {problem}")
            results["skipped"][framework] = problem
            continue
        measured = BENCHES[framework](python, project, args.quick, repeats, visible)
        results["variants"][framework] = measured
    results["total_s"] = round(time.time() - started, 1)
    output.write_text(json.dumps(results, indent=1) + "\n")
    bench.log(f"wrote {output}")
    if output.resolve() == (BENCH / "results-gpu.json").resolve() and results["variants"]:
        update_readme(results)
    return 1 if results["skipped"] else 0


if __name__ == "__main__":
    sys.exit(main())
