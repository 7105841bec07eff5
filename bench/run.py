"""Benchmark the generated trainers against bare framework loops and Google's sample patterns.

``make bench`` (or ``python bench/run.py [--quick]`` with the template's .venv) does, for each
framework: bake the project with cookiecutter, build its virtual environment once (with the
project's own ``make install``), generate the data, optionally time the project's own test
suite, then run every measured command in its own process, interleaved (A B C, C B A, ...).

``probe.py`` records inside each process when every training step starts. Start-up is the
time to the first step; throughput is the work done between two fixed steps after the first
epoch (or the first rounds), a window that holds whole epochs or checkpoint periods, so the
periodic work of a trainer (evaluation, checkpoints, reports) counts at its real rate while
start-up and export do not. Results go to ``results.json``; ``report.py`` writes the table
and plot.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
TEMPLATE = BENCH.parent
WORK = BENCH / ".work"
CONSTRAINTS = TEMPLATE / "tests" / "constraints.txt"
FRAMEWORKS = ("keras", "pytorch", "xgboost")
DATA_VERSION = 3  # datagen.VERSION of the data this harness expects
RUN_TIMEOUT = 900  # seconds for one measured process


@dataclass
class Case:
    """One measured command: ``argv(job_dir)`` for the framework's python, run by probe.py."""

    name: str
    argv: object  # Callable[[str], list[str]]
    hook: str
    disable: str | None = None
    # For a case on other data than the setup's (e.g. fewer examples): its own window and work.
    window: tuple[int, int] | None = None
    work: int | None = None
    env: dict | None = None  # replaces measure_once's variables (e.g. a case's own threads)


@dataclass
class Setup:
    """A framework's benchmark: data sizes, the measured cases and the timing window."""

    framework: str
    train_size: int
    eval_size: int
    window: tuple[int, int]  # throughput = work / (start of step b - start of step a)
    work: int  # examples (or boosting rounds) trained between those two steps
    throughput_unit: str
    checkpoints_in_window: int  # saves the default policy makes between those two steps
    cases: list[Case] = field(default_factory=list)
    notes: dict = field(default_factory=dict)
    # (trainer case, sample case, label) pairs for speed-up ratios; the first is the headline.
    sample_pairs: list[tuple[str, str, str]] = field(default_factory=list)
    # (trainer case, bare case, label): further overhead ratios, e.g. on a larger model.
    overhead_pairs: list[tuple[str, str, str]] = field(default_factory=list)


def flags(**values) -> list[str]:
    """``flags(train_data="x")`` -> ``["--train-data=x"]``."""
    return [f"--{name.replace('_', '-')}={value}" for name, value in values.items()]


def keras_setup(data: Path, quick: bool) -> Setup:
    size, image = (512, 64) if quick else (4096, 96)
    batch, model = 32, "small-cnn"
    # 4 epochs, timed from the first step of epoch 2 to the first of epoch 4: two whole
    # epochs with their end-of-epoch work (evaluation, checkpoint, report).
    steps = size // batch
    shared = flags(model=model, batch_size=batch, image_size=image, train_data=data / "train")
    shared.append("--epochs=4")

    def trainer(job_dir: str) -> list[str]:
        extra = flags(eval_data=data / "eval", weights="none", job_dir=job_dir)
        return ["-m", "trainer.task", *shared, *extra]

    def no_checkpoint(job_dir: str) -> list[str]:
        return [*trainer(job_dir), "--checkpoint-minutes=0"]

    def script(name: str):
        return lambda _job_dir: [str(BENCH / name), *shared]

    def with_eval(argv):
        """The bare loop with the trainer's default evaluation: the eval set after each epoch."""
        return lambda job_dir: [*argv(job_dir), f"--eval-data={data / 'eval'}"]

    return Setup(
        framework="keras",
        train_size=size,
        eval_size=64,
        window=(steps, 3 * steps),
        work=2 * size,
        throughput_unit="images/s",
        checkpoints_in_window=2,
        cases=[
            Case("trainer", trainer, "keras"),
            Case("bare", with_eval(script("bare_keras.py")), "keras"),
            Case("sample", script("sample_keras.py"), "keras"),
            # The Keras trainer has no flag that turns its per-epoch checkpoint off.
            Case(
                "trainer_no_checkpoint",
                no_checkpoint,
                "keras",
                disable="trainer.resume:TrainingState.save",
            ),
        ],
        notes={"model": model, "image_size": image, "batch_size": batch, "epochs": 4},
        sample_pairs=[("trainer", "sample", "codelab tf.data pipeline")],
    )


def pytorch_setup(data: Path, quick: bool) -> Setup:
    # The tiny-BERT cases train on 1,024 reviews: 64-step epochs, so that the per-epoch
    # evaluation and checkpoint weigh about what they do on real data sets' far longer epochs
    # rather than 5-8% of a 16-step epoch. The cases with long steps (the 4-layer BERT, 512
    # tokens) train on the first 256 (datagen's train-short.csv) to keep the run short.
    size, short, batch, length, epochs = (64, 64, 16, 128, 3) if quick else (1024, 256, 16, 128, 4)
    # Timed from the first step of epoch 2 to the first of the last epoch: whole epochs with
    # their end-of-epoch work (evaluation, checkpoint, report).
    steps, short_steps = size // batch, short // batch
    model = data / "tiny-bert"
    shared = flags(train_data=data / "train.csv", batch_size=batch, epochs=epochs)

    def trainer(job_dir: str) -> list[str]:
        extra = flags(
            model_name_or_path=model,
            eval_data=data / "eval.csv",
            max_seq_length=length,
            job_dir=job_dir,
        )
        return ["-m", "trainer.task", *shared, *extra]

    def no_checkpoint(job_dir: str) -> list[str]:
        return [*trainer(job_dir), "--save-steps=1000000000", "--checkpoint-minutes=0"]

    def script(name: str, model: Path = model):
        return lambda _job_dir: [
            str(BENCH / name),
            *shared,
            *flags(model=model, max_seq_length=length),
        ]

    def bare(model: Path = model):
        """The bare loop with the trainer's default evaluation: the eval set after each epoch."""
        argv = script("bare_pytorch.py", model)
        return lambda job_dir: [*argv(job_dir), f"--eval-data={data / 'eval.csv'}"]

    def shorter(argv):
        """The same command on the first reviews only (the last --train-data wins)."""
        return lambda job_dir: [*argv(job_dir), f"--train-data={data / 'train-short.csv'}"]

    def whole_reviews(argv):
        """The same command with reviews kept whole: BERT's 512 positions."""
        return lambda job_dir: [*shorter(argv)(job_dir), "--max-seq-length=512"]

    def small_bert(argv):
        """The same trainer command on the 4-layer, hidden-256 BERT (steps of hundreds of ms)."""
        return lambda job_dir: [
            *shorter(argv)(job_dir),
            f"--model-name-or-path={data / 'small-bert'}",
        ]

    on_short = {"window": (short_steps, (epochs - 1) * short_steps), "work": (epochs - 2) * short}
    cases = [
        Case("trainer", trainer, "torch"),
        Case("bare", bare(), "torch"),
        Case("sample", script("sample_pytorch.py"), "torch"),
        Case("trainer_no_checkpoint", no_checkpoint, "torch"),
        Case("bare_without_eval", script("bare_pytorch.py"), "torch"),
        Case("trainer_small_bert", small_bert(trainer), "torch", **on_short),
        Case("bare_small_bert", shorter(bare(data / "small-bert")), "torch", **on_short),
    ]
    pairs = [("trainer", "sample", f"walkthrough padding to {length} tokens")]
    if not quick:
        cases += [
            Case("trainer_512", whole_reviews(trainer), "torch", **on_short),
            Case("sample_512", whole_reviews(script("sample_pytorch.py")), "torch", **on_short),
        ]
        pairs.append(("trainer_512", "sample_512", "walkthrough padding to 512 tokens"))
    return Setup(
        framework="pytorch",
        train_size=size,
        eval_size=32,
        window=(steps, (epochs - 1) * steps),
        work=(epochs - 2) * size,
        throughput_unit="examples/s",
        checkpoints_in_window=epochs - 2,
        cases=cases,
        notes={
            "batch_size": batch,
            "max_seq_length": length,
            "epochs": epochs,
            "train_examples_4x256_and_512_token_cases": short,
        },
        sample_pairs=pairs,
        overhead_pairs=[
            ("trainer_small_bert", "bare_small_bert", "BERT with 4 layers, hidden 256"),
            ("trainer", "bare_without_eval", "bare loop without its per-epoch evaluation"),
        ],
    )


def xgboost_setup(data: Path, quick: bool) -> Setup:
    size = 10_000 if quick else 50_000
    # Timed over whole periods of the trainer's 50-round checkpoints: rounds 20..70 of 80
    # (quick) or 50..350 of 360 (300 rounds, about 2 CPU-seconds: 100 rounds were too short
    # a window to resolve 5% on a loaded machine).
    rounds, window = (80, (20, 70)) if quick else (360, (50, 350))
    # base_score 0.5, the trainer's default (for Vertex's xgboost 2.1 image), in both: XGBoost's
    # own default estimates it from the labels, which grows other trees at another speed.
    shared = flags(
        train_data=data / "train.csv", max_depth=6, eta=0.1, num_boost_round=rounds, base_score=0.5
    )
    shared.append("--nthread=1")  # one compute thread per process: see measure_once

    def trainer(job_dir: str) -> list[str]:
        extra = flags(eval_data=data / "eval.csv", job_dir=job_dir)
        return ["-m", "trainer.task", *shared, *extra]

    def no_checkpoint(job_dir: str) -> list[str]:
        return [*trainer(job_dir), "--checkpoint-rounds=0", "--checkpoint-minutes=0"]

    def by_time(job_dir: str) -> list[str]:
        return [*trainer(job_dir), "--checkpoint-rounds=0"]

    def bare_without_eval(_job_dir: str) -> list[str]:
        return [str(BENCH / "bare_xgboost.py"), *shared]

    def bare(job_dir: str) -> list[str]:
        """With the AUC of the eval set every 10 rounds, as the trainer reports it."""
        return [*bare_without_eval(job_dir), f"--eval-data={data / 'eval.csv'}"]

    # Small rounds (a GPU's per-round pace on a CPU: about 5-8 CPU-ms): the first 20,000
    # training and 2,000 eval rows (fewer in quick mode), depth 4, 2 threads, against the best
    # bare loops: QuantileDMatrix with the eval set in `evals` (XGBoost scores it every round)
    # or scored every 10 rounds with `eval_set`. Both read XGBoost's prediction cache. OpenMP
    # threads wait passively (OMP_NUM_THREADS caps XGBoost's nthread): spinning threads on a
    # shared machine slowed rounds 10-30x, in every case alike.
    small = {"max_depth": 4, "nthread": 2, "train_rows": min(20_000, size), "eval_rows": 2_000}
    threads = {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "passive"}

    def on_small(argv, evals: bool = False):
        def command(job_dir: str) -> list[str]:
            train = head_csv(data / "train.csv", data / "train-small.csv", small["train_rows"])
            evaluation = head_csv(data / "eval.csv", data / "eval-small.csv", small["eval_rows"])
            extra = [f"--train-data={train}", f"--eval-data={evaluation}", "--max-depth=4"]
            return [*argv(job_dir), *extra, "--nthread=2", *(["--evals"] if evals else [])]

        return command

    return Setup(
        framework="xgboost",
        train_size=size,
        eval_size=size // 10,
        window=window,
        work=window[1] - window[0],
        throughput_unit="rounds/s",
        checkpoints_in_window=(window[1] - window[0]) // 50,
        cases=[
            Case("trainer", trainer, "xgboost"),
            Case("bare", bare, "xgboost"),
            Case("trainer_no_checkpoint", no_checkpoint, "xgboost"),
            Case("bare_without_eval", bare_without_eval, "xgboost"),
            Case("trainer_small", on_small(trainer), "xgboost", env=threads),
            # As on a GPU: checkpoints by time (--checkpoint-minutes) only.
            Case("trainer_small_by_time", on_small(by_time), "xgboost", env=threads),
            Case("bare_small_evals", on_small(bare_without_eval, True), "xgboost", env=threads),
            Case("bare_small", on_small(bare_without_eval), "xgboost", env=threads),
        ],
        notes={"max_depth": 6, "eta": 0.1, "rounds": rounds, "small_rounds_case": small},
        overhead_pairs=[
            ("trainer", "bare_without_eval", "bare loop without its eval metric every 10 rounds"),
            ("trainer_small", "bare_small_evals", f"{SMALL}: bare loop, eval set in evals"),
            ("trainer_small", "bare_small", f"{SMALL}: bare loop, eval_set every 10 rounds"),
            (
                "trainer_small_by_time",
                "bare_small",
                f"{SMALL}, checkpoints by time (the GPU default): bare loop, eval_set every 10",
            ),
        ],
    )


SMALL = "small rounds (20k rows, depth 4, 2 threads)"


def head_csv(source: Path, target: Path, rows: int) -> Path:
    """``target``: the header and first ``rows`` rows of the CSV file ``source`` (written once)."""
    if not target.exists():
        with source.open(encoding="utf-8") as read, target.open("w", encoding="utf-8") as write:
            for index, line in enumerate(read):
                if index > rows:
                    break
                write.write(line)
    return target


SETUPS = {"keras": keras_setup, "pytorch": pytorch_setup, "xgboost": xgboost_setup}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(argv: list[str], cwd: Path, env: dict | None = None, timeout: int = 1800) -> float:
    """Run a command to completion (SIGKILL on timeout); return its wall time or raise."""
    started = time.time()
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise RuntimeError(f"timed out after {timeout} s: {' '.join(argv)}") from None
    elapsed = time.time() - started
    if process.returncode != 0:
        raise RuntimeError(f"exit {process.returncode}: {' '.join(argv)}\n{output[-4000:]}")
    return elapsed


def pip_env() -> dict:
    env = dict(os.environ, PIP_CONSTRAINT=str(CONSTRAINTS))
    env.pop("VIRTUAL_ENV", None)
    return env


def bake(framework: str, destination: Path) -> tuple[Path, float]:
    """Bake with the cookiecutter CLI as a user would; return the project and the time."""
    shutil.rmtree(destination, ignore_errors=True)
    seconds = run(
        [
            sys.executable,
            "-m",
            "cookiecutter",
            str(TEMPLATE),
            "--no-input",
            "--default-config",
            "-o",
            str(destination),
            f"framework={framework}",
        ],
        cwd=TEMPLATE,
    )
    (project,) = [path for path in destination.iterdir() if path.is_dir()]
    return project, seconds


def ensure_venv(framework: str, project: Path) -> Path:
    """The framework's virtual environment, built with the project's ``make install`` once
    and rebuilt only when the project's requirements change."""
    venv = WORK / f"venv-{framework}"
    digest = hashlib.sha256()
    for name in ("requirements.txt", "requirements-dev.txt", "setup.py"):
        digest.update((project / name).read_bytes())
    digest.update(str(project).encode())
    stamp = venv / "bench-stamp"
    if stamp.exists() and stamp.read_text() == digest.hexdigest():
        return venv / "bin" / "python"
    log(f"{framework}: building {venv} (once; several minutes)")
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", str(venv)], cwd=WORK)
    python = venv / "bin" / "python"
    # The packages from this checkout, as the template's `make demo` installs them.
    sources = [
        f"TOOLS_SOURCE={TEMPLATE / 'vertex-trainer-tools'}",
        f"RUNTIME_SOURCE={TEMPLATE / 'vertex-trainer-runtime'}",
    ]
    run(["make", "install", f"PYTHON={python}", *sources], cwd=project, env=pip_env(), timeout=3600)
    stamp.write_text(digest.hexdigest())
    return python


def ensure_data(framework: str, python: Path, setup: Setup, mode: str) -> dict:
    folder = WORK / f"data-{framework}-{mode}"
    info_file = folder / "data.json"
    wanted = {
        "train_examples": setup.train_size,
        "eval_examples": setup.eval_size,
        "version": DATA_VERSION,
    }
    info = json.loads(info_file.read_text()) if info_file.exists() else {}
    if any(info.get(key) != value for key, value in wanted.items()):
        log(f"{framework}: generating data in {folder}")
        shutil.rmtree(folder, ignore_errors=True)
        run(
            [
                str(python),
                str(BENCH / "datagen.py"),
                framework,
                str(folder),
                f"--train-size={setup.train_size}",
                f"--eval-size={setup.eval_size}",
            ],
            cwd=WORK,
        )
    return json.loads(info_file.read_text())


def probe_env(scratch: Path) -> dict:
    """This process's environment for a measured run: no Vertex variables (a local run),
    offline Hugging Face, and caches and the tuning-metric file in the run's scratch folder."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AIP_", "CLUSTER_SPEC", "TF_CONFIG", "CLOUD_ML_"))
    }
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_DATASETS_CACHE=str(scratch / "hf-cache"),
        CLOUD_ML_HP_METRIC_FILE=str(scratch / "hypertune" / "output.metric"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def measure_once(case: Case, setup: Setup, python: Path, project: Path) -> dict:
    """One process: its wall time, start-up, and the wall and CPU time of the timing window."""
    with tempfile.TemporaryDirectory(dir=WORK, prefix="run-") as scratch:
        out = Path(scratch) / "probe.json"
        env = probe_env(Path(scratch))
        env.update(
            TF_CPP_MIN_LOG_LEVEL="2",
            # One compute thread per process, the same for every case: on a shared machine
            # threads that spin-wait for each other inflate both clocks erratically, while one
            # thread's CPU time measures the work done whatever else runs.
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            TF_NUM_INTRAOP_THREADS="1",
            TF_NUM_INTEROP_THREADS="1",
        )
        env.update(case.env or {})
        # bare_keras.py imports the project's trainer package: importable from the project
        # even with an interpreter (--python) that does not have the project installed.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(project), env.get("PYTHONPATH")]))
        argv = [str(python), str(BENCH / "probe.py"), case.hook, str(out)]
        if case.disable:
            argv += ["--disable", case.disable]
        argv += case.argv(str(Path(scratch) / "job"))
        env["BENCH_T0"] = repr(time.time())
        wall = run(argv, cwd=project, env=env, timeout=RUN_TIMEOUT)
        clocks = json.loads(out.read_text()) if out.exists() else {"steps": []}
    steps, cpu = clocks["steps"], clocks.get("cpu", [])
    first, last = case.window or setup.window
    if len(steps) <= last:
        raise RuntimeError(
            f"{case.name}: {len(steps)} training steps seen, the timing window needs "
            f"{last + 1}: {' '.join(argv)}"
        )
    return {
        "process_s": round(wall, 3),
        "first_step_s": round(steps[0], 3),
        "first_step_cpu_s": round(cpu[0], 3),
        "window_s": round(steps[last] - steps[first], 4),
        "window_cpu_s": round(cpu[last] - cpu[first], 4),
        "steps": len(steps),
    }


def rates(setup: Setup, case: Case, run: dict) -> tuple[float, float]:
    """Work per wall-clock second and per CPU second (all threads) within the window."""
    work = case.work or setup.work
    return work / run["window_s"], work / run["window_cpu_s"]


def summarize(setup: Setup, runs: dict) -> dict:
    """Median throughputs and start-up per case, then the ratios between cases.

    ``throughput`` is work per CPU-second of the process (one compute thread), the headline on
    a shared machine; ``wall_throughput`` is work per wall-clock second.
    """
    rated = {case.name: [rates(setup, case, m) for m in runs[case.name]] for case in setup.cases}
    cases = {}
    for case in setup.cases:
        measured = runs[case.name]
        cases[case.name] = {
            "throughput": round(statistics.median(cpu for _, cpu in rated[case.name]), 3),
            "wall_throughput": round(statistics.median(wall for wall, _ in rated[case.name]), 3),
            **{
                key: round(statistics.median(m[key] for m in measured), 2)
                for key in ("first_step_s", "first_step_cpu_s", "process_s")
            },
            "runs": measured,
        }

    def compare(a: str, b: str) -> dict:
        """Ratio of medians; range: the smallest and largest ratio of two runs of a repeat."""
        result = {}
        for index, key in ((1, "ratio"), (0, "wall_ratio")):
            field = "throughput" if index else "wall_throughput"
            pairs = [x[index] / y[index] for x, y in zip(rated[a], rated[b], strict=True)]
            result[key] = round(cases[a][field] / cases[b][field], 3)
            result[key.replace("ratio", "range")] = [round(min(pairs), 3), round(max(pairs), 3)]
        return result

    overhead = compare("trainer", "bare")
    checkpoint = compare("trainer_no_checkpoint", "trainer")
    result = {
        "throughput_unit": setup.throughput_unit,
        "overhead_ratio": overhead["ratio"],
        "overhead": overhead,
        "overhead_no_checkpoint": compare("trainer_no_checkpoint", "bare"),
        # Training time with the default checkpoint policy over training time with none.
        "checkpoint_time_ratio": checkpoint["ratio"],
        "checkpoint": checkpoint,
        # CPU seconds one checkpoint adds, from the two median window times.
        "checkpoint_cpu_s_each": round(
            (
                setup.work / cases["trainer"]["throughput"]
                - setup.work / cases["trainer_no_checkpoint"]["throughput"]
            )
            / setup.checkpoints_in_window,
            3,
        ),
        # CPU milliseconds the trainer adds per unit of work (a round, an example, an image)
        # over the bare loop with the same evaluation: the per-round overhead of XGBoost.
        "overhead_cpu_ms_each": round(
            1000 / cases["trainer"]["throughput"] - 1000 / cases["bare"]["throughput"], 4
        ),
        "startup_s": {name: cases[name]["first_step_s"] for name in ("trainer", "bare")},
        "startup_cpu_s": {name: cases[name]["first_step_cpu_s"] for name in ("trainer", "bare")},
        "speedup_vs_sample": None,
        "speedups": {},
        "overheads": {},
        "cases": cases,
    }
    for trainer, bare, label in setup.overhead_pairs:
        result["overheads"][label] = compare(trainer, bare)
    for trainer, sample, label in setup.sample_pairs:
        result["speedups"][label] = compare(trainer, sample)
    if setup.sample_pairs:
        trainer, sample, label = setup.sample_pairs[0]
        result["speedup_vs_sample"] = result["speedups"][label]["ratio"]
        result["sample_pattern"] = label
        result["startup_s"]["sample"] = cases[sample]["first_step_s"]
        result["startup_cpu_s"]["sample"] = cases[sample]["first_step_cpu_s"]
    return result


def time_test_suite(project: Path, python: Path) -> tuple[float, str]:
    """Seconds of the project's ``make test`` and pytest's summary line (failures included:
    the time is still worth reporting, and the variant's own suite is where to look)."""
    started = time.time()
    result = subprocess.run(
        ["make", "test", f"PYTHON={python}"],
        cwd=project,
        env=pip_env(),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    output = result.stdout.splitlines()
    lines = [line.strip("= ") for line in output if line.startswith("====")]
    summary = lines[-1] if lines else f"exit {result.returncode}"
    failed = [line.split()[1] for line in output if line.startswith("FAILED ")]
    if failed:
        summary += f"; failed: {', '.join(failed)}"
    return round(time.time() - started, 1), summary


def bench_framework(
    framework: str, quick: bool, repeats: int, tests: bool, python: Path | None = None
) -> dict:
    mode = "quick" if quick else "full"
    bake_times = []
    for index in range(max(1, repeats)):
        _, seconds = bake(framework, WORK / "bakes" / f"{framework}-{index}")
        bake_times.append(seconds)
    shutil.rmtree(WORK / "bakes", ignore_errors=True)
    project, _ = bake(framework, WORK / framework)
    python = python or ensure_venv(framework, project)
    setup = SETUPS[framework](WORK / f"data-{framework}-{mode}", quick)
    data_info = ensure_data(framework, python, setup, mode)
    result = {
        "bake_s": round(statistics.median(bake_times), 2),
        "versions": versions(python),
        "data": data_info,
        "setup": {
            "repeats": repeats,
            "timed_steps": list(setup.window),
            "work_timed": setup.work,
            **setup.notes,
        },
        "test_suite_s": None,
    }
    if tests:
        log(f"{framework}: running the generated project's own test suite (make test)")
        result["test_suite_s"], result["test_suite"] = time_test_suite(project, python)
        log(f"{framework}: make test took {result['test_suite_s']} s: {result['test_suite']}")

    runs = {case.name: [] for case in setup.cases}
    for repeat in range(repeats):
        order = setup.cases if repeat % 2 == 0 else list(reversed(setup.cases))
        for case in order:
            measured = measure_once(case, setup, python, project)
            runs[case.name].append(measured)
            wall_rate, cpu_rate = rates(setup, case, measured)
            log(
                f"{framework} #{repeat + 1} {case.name}: {measured['process_s']:.1f} s, first "
                f"step at {measured['first_step_s']:.1f} s, {cpu_rate:.2f} "
                f"{setup.throughput_unit} of CPU time, {wall_rate:.2f} of wall-clock time"
            )
    result.update(summarize(setup, runs))
    return result


def versions(python: Path) -> dict:
    code = (
        "import importlib.metadata as m, json, platform\n"
        "names = ['tensorflow', 'tf-keras', 'torch', 'transformers', 'datasets', 'accelerate',"
        " 'xgboost-cpu', 'xgboost', 'pandas', 'numpy']\n"
        "found = {'python': platform.python_version()}\n"
        "for name in names:\n"
        "    try:\n"
        "        found[name] = m.version(name)\n"
        "    except m.PackageNotFoundError:\n"
        "        pass\n"
        "print(json.dumps(found))\n"
    )
    output = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return json.loads(output.stdout)


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": memory_gib,
        "os": platform.platform(),
        "python": platform.python_version(),
        "gpu": None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI-sized: less data, 1 repeat")
    parser.add_argument("--repeats", type=int, default=None, help="default: 1 quick, 3 full")
    parser.add_argument("--frameworks", default="xgboost,pytorch,keras")
    parser.add_argument(
        "--tests",
        choices=["auto", "yes", "no"],
        default="auto",
        help="time each generated project's own test suite (auto: not with --quick)",
    )
    parser.add_argument(
        "--output",
        default=None,
        help="results file; README.md and results.png are written beside it "
        "(default: bench/results.json, or bench/.work/quick/results.json with --quick)",
    )
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="FRAMEWORK=PATH",
        help="an interpreter that already has the project's requirements, instead of building "
        "bench/.work/venv-<framework>, e.g. pytorch=/opt/venv/bin/python (repeatable)",
    )
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="run the GPU benchmarks instead (gpu.py: BERT-base in bf16, XGBoost on CUDA; "
        "gpu.py's own options pass through); prints 'no GPU: skipped' and exits 0 without a GPU",
    )
    args, passed = parser.parse_known_args()
    if passed and not args.gpu:
        parser.error(f"unrecognized arguments: {' '.join(passed)}")
    if args.gpu:
        # bench/gpu.py in a process of its own: it imports this module for its helpers.
        passed += ["--frameworks", args.frameworks] + (["--quick"] if args.quick else [])
        passed += ["--repeats", str(args.repeats)] if args.repeats else []
        passed += [item for pair in args.python for item in ("--python", pair)]
        passed += ["--output", args.output] if args.output else []
        return subprocess.run([sys.executable, str(BENCH / "gpu.py"), *passed]).returncode
    repeats = args.repeats or (1 if args.quick else 3)
    default_folder = WORK / "quick" if args.quick else BENCH
    output = Path(args.output) if args.output else default_folder / "results.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    tests = args.tests == "yes" or (args.tests == "auto" and not args.quick)
    WORK.mkdir(exist_ok=True)
    interpreters = {}
    for item in args.python:
        framework, _, path = item.partition("=")
        if framework not in FRAMEWORKS or not path:
            parser.error(f"--python: {item!r} is not FRAMEWORK=PATH, e.g. keras=venv/bin/python")
        interpreters[framework] = Path(path)

    started = time.time()
    results = {
        "mode": "quick" if args.quick else "full",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "load_average_start": list(os.getloadavg()),
        "variants": {},
    }
    for framework in args.frameworks.split(","):
        log(f"{framework}: start")
        results["variants"][framework] = bench_framework(
            framework, args.quick, repeats, tests, interpreters.get(framework)
        )
        variant = results["variants"][framework]
        unit = variant["throughput_unit"].split("/")[0].rstrip("s")  # "rounds/s": a round
        log(
            f"{framework}: overhead ratio {variant['overhead_ratio']} "
            f"({variant['overhead_cpu_ms_each']} CPU ms per {unit}), "
            f"speed-up vs sample "
            f"{variant['speedup_vs_sample']}, checkpoint time ratio "
            f"{variant['checkpoint_time_ratio']}"
        )
    results["load_average_end"] = list(os.getloadavg())
    results["total_s"] = round(time.time() - started, 1)
    output.write_text(json.dumps(results, indent=1) + "\n")
    log(f"wrote {output} in {results['total_s']} s")

    import report  # bench/report.py, next to this file

    report.main([str(output)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
