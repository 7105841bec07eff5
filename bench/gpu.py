"""GPU benchmark in one command and a fixed time budget: trainer / bare loop on one GPU.

Here (with internet):   ``python bench/gpu.py --kit``  downloads the wheels an air-gapped GPU VM
lacks and bakes the PyTorch and XGBoost projects into ``bench/.gpu-kit/`` (about 56 MiB).
On the GPU VM (no internet): ``python3 bench/gpu.py --budget 300``  installs the kit into a
venv that sees the VM's own PyTorch stack, makes the data and model in seconds, then measures
the cases, most important first, writing every result as soon as it is measured
(``results-gpu.jsonl``, one JSON line each, and ``results-gpu.json`` rewritten after each
case): a run cut by its budget, or killed, keeps what it finished.
Here, on the CPU: ``python bench/gpu.py --device cpu --tiny`` runs the same code paths in
seconds with a tiny BERT and a small table (``--python pytorch=... --python xgboost=...``).

Cases (PyTorch: a BERT-base-shaped classifier, random weights, bf16; XGBoost: 1,000,000
HIGGS-like rows, depth 6), in this order, then again while the budget lasts:
``bare_512``/``trainer_512`` and ``bare_128``/``trainer_128`` (every example padded, 8,192
tokens a step), ``bare_cuda``/``trainer_cuda`` (XGBoost, the same eval set scored every 10
rounds in both), ``trainer_imdb`` (the trainer's defaults: IMDB-shaped lengths up to 512
tokens, dynamic padding, batches grouped by length), ``trainer_compiled_128`` and
``trainer_compiled_imdb`` (the same two with ``--torch-compile``, each after its eager case),
``bare_cpu``/``trainer_cpu`` (XGBoost's
CPU ``hist`` on every core). Throughput is timed like run.py (probe.py: the start of every
optimizer step or boosting round, over a window after warm-up); every record names the device.
Without an NVIDIA GPU (and without ``--device cpu``) it prints ``no GPU: skipped`` and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import site
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import run as bench  # bench/run.py: bake, logging and version helpers

BENCH = bench.BENCH
WORK = bench.WORK
KIT = BENCH / ".gpu-kit"
SHIMS = BENCH / "gpu_shims"
FRAMEWORKS = ("pytorch", "xgboost")
README_START = "<!-- bench:gpu:start -->"
README_END = "<!-- bench:gpu:end -->"

# What the GPU VM's Python 3.12 stack (torch with CUDA, transformers, accelerate, tokenizers,
# pandas, pyarrow, numpy, psutil) lacks for the two trainers: datasets with the dependencies
# transformers does not bring (dill, multiprocess, xxhash), cloudml-hypertune (an sdist on
# PyPI: built into a wheel here) and XGBoost's CUDA build, installed without its dependencies
# (scipy, 35 MB, does not fit: gpu_shims/ stands in; NCCL comes with torch, and one GPU does
# not load it). About 56 MiB in all; the tool that lends the GPU carries 64 MiB with the tree.
KIT_WHEELS = [
    "datasets==5.2.0",
    "dill==0.4.1",
    "multiprocess==0.70.19",
    "xxhash==4.1.0",
    "cloudml-hypertune==0.1.0.dev6",
    "xgboost==3.4.1",
]
KIT_PLATFORM = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:"]
for _tag in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"):
    KIT_PLATFORM += ["--platform", _tag]
KIT_MIB_LIMIT = 60

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


# ---------------------------------------------------------------------------------------------
# The kit: made here, installed on the VM


def make_kit(kit: Path = KIT) -> int:
    """Download exactly KIT_WHEELS into ``kit/wheels`` and bake both projects into
    ``kit/projects``; print the size and how to carry it. Run where PyPI is reachable."""
    wheels = kit / "wheels"
    shutil.rmtree(kit, ignore_errors=True)
    wheels.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip"]
    for requirement in KIT_WHEELS:
        if requirement.startswith("cloudml-hypertune"):  # only an sdist: build the wheel here
            command = [*pip, "wheel", "--no-deps", "-w", str(wheels), requirement]
        else:
            command = [*pip, "download", "--no-deps", *KIT_PLATFORM, "-d", str(wheels)]
            command.append(requirement)
        bench.log(" ".join(command))
        bench.run(command, cwd=BENCH, timeout=1200)
    # The trainers' runtime, from this checkout (pure Python, no dependencies: a small wheel).
    runtime = bench.TEMPLATE / "vertex-trainer-runtime"
    bench.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(runtime)], cwd=BENCH, timeout=600)
    for framework in FRAMEWORKS:
        bench.bake(framework, kit / "projects" / framework)
    size = sum(path.stat().st_size for path in kit.rglob("*") if path.is_file())
    for path in sorted(wheels.iterdir()):
        print(f"  {path.stat().st_size / 2**20:7.2f} MiB  {path.name}")
    print(f"{kit}: {size / 2**20:.1f} MiB (wheels and baked projects; limit {KIT_MIB_LIMIT} MiB)")
    print("Carry it with the working tree (run tool: carry=['bench/.gpu-kit']); on the GPU VM:")
    print("  python3 bench/gpu.py --budget 300")
    return 0 if size <= KIT_MIB_LIMIT * 2**20 else 1


CHECKS = {
    "pytorch": "import torch as t, datasets, hypertune; "
    "print(t.cuda.is_available(), t.__version__, t.version.cuda)",
    "xgboost": "import xgboost as x, hypertune; "
    "print(bool(x.build_info().get('USE_CUDA')), x.__version__)",
}


def has_modules(python: Path, *modules: str, env: dict | None = None) -> bool:
    code = "import " + ", ".join(modules)
    result = subprocess.run([str(python), "-c", code], capture_output=True, env=env, timeout=300)
    return result.returncode == 0


def kit_python(kit: Path, journal: Journal) -> Path:
    """A venv on top of this interpreter's packages (the VM's PyTorch stack) with the kit's
    wheels installed from the folder, no index; reused when it already imports them."""
    venv = WORK / "venv-gpu-kit"
    python = venv / "bin" / "python"
    if python.exists() and has_modules(
        python, "datasets", "hypertune", "xgboost", "vertex_trainer_runtime"
    ):
        return python
    shutil.rmtree(venv, ignore_errors=True)
    started = time.time()
    try:
        bench.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], cwd=WORK)
        pip = [str(python), "-m", "pip"]
    except RuntimeError:  # no ensurepip (Debian without python3-venv): this interpreter's pip
        shutil.rmtree(venv, ignore_errors=True)
        bench.run(
            [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
            cwd=WORK,
        )
        pip = [sys.executable, "-m", "pip", "--python", str(python)]
    # The packages of the interpreter running this harness, also when it is itself a venv
    # (--system-site-packages alone would show the base installation's only).
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "_bench_base_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    install = [*pip, "install", "--no-index", "--find-links", str(kit / "wheels")]
    names = [r.split("==")[0] for r in KIT_WHEELS if not r.startswith("xgboost")]
    names.append("vertex-trainer-runtime")
    note = "resolved against the VM's packages"
    try:
        bench.run([*install, *names], cwd=WORK, timeout=600)
    except RuntimeError as error:  # a pin the VM's stack does not meet: install as they are
        note = f"--no-deps after: {str(error).splitlines()[-1][:300]}"
        bench.run([*install, "--no-deps", *names], cwd=WORK, timeout=600)
    xgboost = next(r for r in KIT_WHEELS if r.startswith("xgboost"))
    bench.run([*install, "--no-deps", xgboost], cwd=WORK, timeout=600)
    check = subprocess.run([*pip, "check"], capture_output=True, text=True, timeout=300)
    journal.add(
        "setup",
        step="kit",
        seconds=round(time.time() - started, 1),
        install=note,
        pip_check=check.stdout.strip().splitlines()[-10:],
    )
    return python


# ---------------------------------------------------------------------------------------------
# Results: one JSON line per record, and the whole file rewritten after each


class Journal:
    """Appends every record to ``<output>.jsonl`` at once and rewrites ``output`` (all the
    records so far and the ratios of the pairs measured), so a cut run keeps what it did."""

    def __init__(self, output: Path, header: dict):
        self.output = output
        self.lines = output.with_suffix(".jsonl")
        self.header = header
        self.records: list[dict] = []
        output.parent.mkdir(parents=True, exist_ok=True)
        self.lines.write_text("")
        self.add("start", **header)

    def add(self, kind: str, **values) -> dict:
        record = {"kind": kind, "time": time.strftime("%H:%M:%S", time.gmtime()), **values}
        self.records.append(record)
        with self.lines.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.write()
        return record

    def summary(self) -> dict:
        measured = [r for r in self.records if r["kind"] == "case" and "rate" in r]
        cases: dict[str, dict] = {}
        for record in measured:
            entry = cases.setdefault(record["case"], {"unit": record["unit"], "rates": []})
            entry["rates"].append(record["rate"])
            entry["median"] = round(statistics.median(entry["rates"]), 3)
            entry["device"] = record["device"]
        ratios = {}
        for name in cases:
            if name.startswith("trainer_") and "bare_" + name[8:] in cases:
                bare = cases["bare_" + name[8:]]
                ratios[name[8:]] = {
                    "trainer_over_bare": round(cases[name]["median"] / bare["median"], 3),
                    # Wall milliseconds the trainer adds per unit (an XGBoost round, a sample).
                    "overhead_ms_each": round(
                        1000 / cases[name]["median"] - 1000 / bare["median"], 4
                    ),
                    "repeats": [len(cases[name]["rates"]), len(bare["rates"])],
                    "device": cases[name]["device"],
                }
        return {"cases": cases, "trainer_over_bare": ratios}

    def document(self) -> dict:
        return {**self.header, **self.summary(), "records": self.records}

    def write(self) -> None:
        document = self.document()
        partial = self.output.with_suffix(".json.partial")
        partial.write_text(json.dumps(document, indent=1) + "\n")
        partial.replace(self.output)  # never a half-written file


# ---------------------------------------------------------------------------------------------
# Cases and the budget


@dataclass
class Case:
    name: str
    framework: str
    argv: list[str]  # after ``python probe.py <hook> <out>``; {job_dir} is replaced
    window: tuple[int, int]  # timed from the start of step a to the start of step b
    work: float  # samples or rounds between them
    unit: str
    estimate_s: float  # expected seconds for the whole process, before one was measured
    extra: dict = field(default_factory=dict)


@dataclass
class Sizes:
    """Steps, rows and batch sizes: the GPU run's, or the CPU check's (``tiny``)."""

    tiny: bool
    warmup: int = 20
    timed: int = 150
    tokens_per_step: int = 8192
    imdb_batch: int = 32
    reviews: int = 0
    eval_reviews: int = 256
    rows: int = 1_000_000
    eval_rows: int = 10_000
    rounds_window: tuple[int, int] = (20, 220)
    pytorch_estimate_s: float = 30.0
    compile_estimate_s: float = 60.0  # torch.compile of BERT-base: 30-45 s measured on an H200
    xgboost_estimate_s: float = 20.0

    def __post_init__(self):
        if self.tiny:
            self.warmup, self.timed, self.tokens_per_step, self.imdb_batch = 2, 6, 1024, 4
            self.eval_reviews, self.rows, self.eval_rows = 16, 5_000, 1_000
            self.rounds_window = (5, 25)
            self.pytorch_estimate_s, self.xgboost_estimate_s = 20.0, 10.0
            self.compile_estimate_s = 60.0
        steps = self.warmup + self.timed + 1
        self.reviews = steps * max(self.tokens_per_step // 128, self.imdb_batch)


def pytorch_cases(data: Path, sizes: Sizes, precision: str) -> list[Case]:
    window = (sizes.warmup, sizes.warmup + sizes.timed)
    max_steps = window[1] + 1
    model, train = data / "model", data / "train.csv"
    cases = []
    for length in (512, 128):
        batch = sizes.tokens_per_step // length
        shared = bench.flags(batch_size=batch, max_seq_length=length, max_steps=max_steps)
        shared += bench.flags(train_data=train, precision=precision)
        bare = [str(BENCH / "bare_pytorch_gpu.py"), *shared, f"--model={model}"]
        trainer = ["-m", "trainer.task", *shared, f"--eval-data={data / 'eval.csv'}"]
        trainer += [f"--model-name-or-path={model}", "--pad-to-max-length"]
        trainer += ["--no-group-by-length", "--nproc-per-node=1", "--job-dir={job_dir}"]
        for name, argv in ((f"bare_{length}", bare), (f"trainer_{length}", trainer)):
            extra = {"batch_size": batch, "tokens": length, "padding": "max_length"}
            work = sizes.timed * batch
            cases.append(
                Case(
                    name,
                    "pytorch",
                    argv,
                    window,
                    work,
                    "samples/s",
                    sizes.pytorch_estimate_s,
                    extra,
                )
            )
    shared = bench.flags(batch_size=sizes.imdb_batch, max_seq_length=512, max_steps=max_steps)
    shared += bench.flags(train_data=train, precision=precision)
    imdb = ["-m", "trainer.task", *shared, f"--eval-data={data / 'eval.csv'}"]
    imdb += [f"--model-name-or-path={model}", "--nproc-per-node=1", "--job-dir={job_dir}"]
    extra = {"batch_size": sizes.imdb_batch, "tokens": "<= 512", "padding": "dynamic, grouped"}
    cases.append(
        Case(
            "trainer_imdb",
            "pytorch",
            imdb,
            window,
            sizes.timed * sizes.imdb_batch,
            "samples/s",
            sizes.pytorch_estimate_s,
            extra,
        )
    )
    # The compiled fast path (--torch-compile): compilation runs in the warm-up steps.
    compiled_128 = next(case for case in cases if case.name == "trainer_128")
    for name, base in (
        ("trainer_compiled_128", compiled_128),
        ("trainer_compiled_imdb", cases[-1]),
    ):
        extra = {**base.extra, "torch_compile": True}
        estimate = sizes.pytorch_estimate_s + sizes.compile_estimate_s
        argv = [*base.argv, "--torch-compile"]
        cases.append(
            Case(name, "pytorch", argv, base.window, base.work, base.unit, estimate, extra)
        )
    return cases


def xgboost_cases(data: Path, sizes: Sizes, devices: list[str]) -> list[Case]:
    first, last = sizes.rounds_window
    rounds = last + 10
    # base_score 0.5, the trainer's default, in both (see run.py); the eval set's AUC every
    # 10 rounds in both (the trainer's --report-rounds default).
    shared = bench.flags(train_data=data / "train.parquet", max_depth=6, eta=0.1)
    shared += bench.flags(num_boost_round=rounds, base_score=0.5)
    evaluation = f"--eval-data={data / 'eval.parquet'}"
    cases = []
    for device in devices:
        bare = [str(BENCH / "bare_xgboost.py"), *shared, evaluation, f"--device={device}"]
        trainer = ["-m", "trainer.task", *shared, evaluation, f"--device={device}"]
        trainer.append("--job-dir={job_dir}")
        for name, argv in ((f"bare_{device}", bare), (f"trainer_{device}", trainer)):
            extra = {"device_flag": device, "rows": sizes.rows}
            cases.append(
                Case(
                    name,
                    "xgboost",
                    argv,
                    (first, last),
                    last - first,
                    "rounds/s",
                    sizes.xgboost_estimate_s,
                    extra,
                )
            )
    return cases


def ordered(pytorch: list[Case], xgboost: list[Case]) -> list[list[Case]]:
    """Most important first: the 512- and 128-token pairs, XGBoost on the accelerator, the
    trainer on IMDB-shaped lengths, then XGBoost on the CPU. Groups: a bare loop and its
    trainer, measured one after the other."""
    torch = {case.name: case for case in pytorch}
    xgb = {case.name: case for case in xgboost}
    groups = [
        [torch.get("bare_512"), torch.get("trainer_512")],
        [torch.get("bare_128"), torch.get("trainer_128")],
        [torch.get("trainer_compiled_128")],
        [xgb.get("bare_cuda"), xgb.get("trainer_cuda")],
        [torch.get("trainer_imdb")],
        [torch.get("trainer_compiled_imdb")],
        [xgb.get("bare_cpu"), xgb.get("trainer_cpu")],
    ]
    return [kept for group in groups if (kept := [case for case in group if case])]


class Budget:
    """Seconds left of ``--budget``, counted from the start of the run."""

    def __init__(self, seconds: float, clock=time.monotonic):
        self.clock = clock
        self.deadline = clock() + seconds

    def left(self) -> float:
        return self.deadline - self.clock()


def run_cases(groups: list[list[Case]], repeats: int, budget: Budget, journal, measure) -> None:
    """Every group in order, up to ``repeats`` passes (bare loop and trainer swap places every
    other pass). A case runs only if its expected time (its last process time, else its
    estimate) fits the budget left, and is given only that long. ``measure(case, timeout)``
    runs one process and returns probe.py's timings (``process_s``, ``window_s``, ...)."""
    last_time: dict[str, float] = {}
    for repeat in range(1, repeats + 1):
        for group in groups:
            for case in group if repeat % 2 else list(reversed(group)):
                expected = last_time.get(case.name, case.estimate_s)
                left = budget.left()
                if left < expected:
                    why = f"{left:.0f} s left, expected {expected:.0f} s"
                    journal.add("skipped", case=case.name, repeat=repeat, why=why)
                    continue
                try:
                    measured = measure(case, timeout=left)
                except RuntimeError as error:
                    message = str(error)[-2000:]
                    journal.add("failed", case=case.name, repeat=repeat, error=message)
                    bench.log(f"#{repeat} {case.name} failed: {message.splitlines()[0]}")
                    continue
                last_time[case.name] = measured["process_s"]
                rate = round(case.work / measured["window_s"], 3)
                journal.add(
                    "case",
                    case=case.name,
                    framework=case.framework,
                    repeat=repeat,
                    rate=rate,
                    unit=case.unit,
                    **case.extra,
                    **measured,
                )
                bench.log(
                    f"#{repeat} {case.name}: {rate} {case.unit}, process "
                    f"{measured['process_s']:.1f} s, {budget.left():.0f} s left"
                )
        if budget.left() <= 0:
            return


# ---------------------------------------------------------------------------------------------
# Processes


@dataclass
class Target:
    """Where a framework's cases run: its interpreter, baked project and environment."""

    python: Path
    project: Path
    env: dict
    device: str  # the GPU's (or CPU's) name, recorded with every figure


def measure(case: Case, timeout: float, target: Target) -> dict:
    """One process under probe.py, stopped when the window's last step starts."""
    with tempfile.TemporaryDirectory(dir=WORK, prefix="gpu-run-") as scratch:
        out = Path(scratch) / "probe.json"
        env = bench.probe_env(Path(scratch)) | target.env
        env["BENCH_STOP_AT_STEP"] = str(case.window[1] + 1)
        env["BENCH_T0"] = repr(time.time())
        hook = "torch" if case.framework == "pytorch" else "xgboost"
        command = [str(target.python), str(BENCH / "probe.py"), hook, str(out)]
        command += [part.replace("{job_dir}", str(Path(scratch) / "job")) for part in case.argv]
        wall = bench.run(command, cwd=target.project, env=env, timeout=max(1, int(timeout)))
        clocks = json.loads(out.read_text()) if out.exists() else {"steps": [], "cpu": []}
    steps, cpu = clocks["steps"], clocks["cpu"]
    first, last = case.window
    if len(steps) <= last:
        raise RuntimeError(f"{len(steps)} steps seen, the window needs {last + 1}: {command}")
    return {
        "device": target.device,
        "process_s": round(wall, 2),
        "first_step_s": round(steps[0], 2),
        "window_s": round(steps[last] - steps[first], 4),
        # CPU seconds of the process (all threads) in the window: near window_s or above it
        # means the host, not the accelerator, sets the pace.
        "window_cpu_s": round(cpu[last] - cpu[first], 4),
        "steps": len(steps),
    }


def setup_step(journal: Journal, budget: Budget, name: str, argv: list[str], **kw) -> dict:
    """Run one set-up command within the budget; its JSON output (last line) is recorded."""
    started = time.time()
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=max(1, budget.left()), **kw
    )
    if result.returncode != 0:
        raise RuntimeError(f"{name}: exit {result.returncode}\n{result.stderr[-3000:]}")
    info = json.loads(result.stdout.strip().splitlines()[-1])
    journal.add("setup", step=name, seconds=round(time.time() - started, 1), result=info)
    return info


def project_for(framework: str) -> Path:
    """The kit's baked project (air-gapped VM), else a fresh bake with cookiecutter."""
    baked = KIT / "projects" / framework
    if baked.is_dir():
        (project,) = [path for path in baked.iterdir() if path.is_dir()]
        return project
    project, _ = bench.bake(framework, WORK / f"{framework}-gpu")
    return project


def interpreter_for(framework: str, given: dict, journal: Journal) -> Path:
    if framework in given:
        return Path(given[framework])
    if (KIT / "wheels").is_dir():
        return kit_python(KIT, journal)
    return Path(sys.executable)


def problem_with(framework: str, python: Path, cuda: bool) -> str | None:
    """Why ``python`` cannot run ``framework``'s cases (on CUDA when ``cuda``), or None."""
    env = dict(os.environ)
    if framework == "xgboost" and not has_modules(python, "scipy"):
        env["PYTHONPATH"] = str(SHIMS)
    result = subprocess.run(
        [str(python), "-c", CHECKS[framework]],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if result.returncode != 0:
        return f"{python}: {(result.stderr.strip().splitlines() or ['failed'])[-1]}"
    ok, *version = result.stdout.split()
    if ok == "True" or not cuda:
        return None
    if framework == "pytorch":
        return f"torch {version[0]} in {python} cannot use CUDA (CUDA build: {version[1]})"
    return f"xgboost {version[0]} in {python} is a CPU-only build: install the package 'xgboost'"


def data_folder(framework: str, sizes: Sizes) -> Path:
    folder = WORK / f"gpu-data-{framework}{'-tiny' if sizes.tiny else ''}"
    shutil.rmtree(folder, ignore_errors=True)
    return folder


def prepare_pytorch(python, sizes, cuda, device_env, journal, budget) -> tuple[list[Case], dict]:
    folder = data_folder("pytorch", sizes)
    argv = [str(python), str(BENCH / "gpu_setup.py"), "pytorch", str(folder)]
    argv += [f"--train-size={sizes.reviews}", f"--eval-size={sizes.eval_reviews}"]
    info = setup_step(journal, budget, "pytorch data and model", argv + ["--tiny"] * sizes.tiny)
    precision = "fp32"
    if cuda:
        peak = setup_step(
            journal,
            budget,
            "peak",
            [str(python), str(BENCH / "gpu_setup.py"), "peak"],
            env=os.environ | device_env,
        )
        precision = "bf16" if peak.get("native_bf16") else "fp16"
        info["peak"] = peak | {"table": table_peak(peak.get("name", ""))}
    info["precision"] = precision
    return pytorch_cases(folder, sizes, precision), info


def prepare_xgboost(python, sizes, cuda, journal, budget) -> list[Case]:
    folder = data_folder("xgboost", sizes)
    argv = [str(python), str(BENCH / "gpu_setup.py"), "xgboost", str(folder)]
    argv += [f"--train-size={sizes.rows}", f"--eval-size={sizes.eval_rows}"]
    setup_step(journal, budget, "xgboost data", argv)
    return xgboost_cases(folder, sizes, ["cuda", "cpu"] if cuda else ["cpu"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kit",
        action="store_true",
        help=f"here, with internet: download the wheels and bake the projects into {KIT}",
    )
    parser.add_argument(
        "--budget", type=float, default=300, help="seconds for the whole run, set-up included"
    )
    parser.add_argument("--repeats", type=int, default=3, help="passes over the cases at most")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument(
        "--tiny", action="store_true", help="a tiny BERT and a small table: the CPU check"
    )
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="FRAMEWORK=PATH",
        help="an interpreter with the project's requirements (and CUDA builds), instead of "
        "the kit's venv or this interpreter, e.g. pytorch=/opt/venv/bin/python",
    )
    parser.add_argument(
        "--output",
        default=None,
        help="results file (default: bench/results-gpu.json, which also updates README.md; "
        "bench/.work/tiny/results-gpu.json with --tiny); a .jsonl beside it gets each record",
    )
    parser.add_argument("--quick", action="store_true", help="one pass (--repeats 1)")
    parser.add_argument(
        "--readme-from",
        metavar="RESULTS",
        help="write README.md's GPU section from a results file fetched from the GPU VM",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1
    if args.kit:
        return make_kit()
    if args.readme_from:
        update_readme(json.loads(Path(args.readme_from).read_text()))
        return 0
    interpreters = {}
    for item in args.python:
        framework, _, path = item.partition("=")
        if framework not in FRAMEWORKS or not path:
            parser.error(f"--python: {item!r} is not FRAMEWORK=PATH, e.g. xgboost=venv/bin/python")
        interpreters[framework] = path
    frameworks = [name for name in args.frameworks.split(",") if name in FRAMEWORKS]
    for name in sorted(set(args.frameworks.split(",")) - set(FRAMEWORKS)):
        print(f"{name}: no GPU benchmark (GPU cases: {', '.join(FRAMEWORKS)})")
    budget = Budget(args.budget)
    cuda = args.device == "cuda"
    if cuda:
        gpus, why = nvidia_gpus()
        if not gpus:
            print(f"no GPU: skipped ({why}); nothing measured, nothing written")
            return 0
        # The first visible GPU, by the id CUDA_VISIBLE_DEVICES uses.
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", gpus[0]["index"]).split(",")[0].strip()
        gpu = next((entry for entry in gpus if entry["index"] == visible), gpus[0])
        device, device_env = gpu["name"], {"CUDA_VISIBLE_DEVICES": visible}
    else:
        gpus, gpu = [], None
        device, device_env = f"CPU: {bench.machine()['cpu']}", {"CUDA_VISIBLE_DEVICES": ""}
    tiny_output = WORK / "tiny" / "results-gpu.json"
    default = tiny_output if args.tiny or not cuda else BENCH / "results-gpu.json"
    output = Path(args.output) if args.output else default
    WORK.mkdir(exist_ok=True)
    sizes = Sizes(tiny=args.tiny)
    header = {
        "mode": ("tiny" if args.tiny else "full") + f", {args.device}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": device,
        "machine": bench.machine() | {"gpu": device if cuda else None},
        "gpus": gpus,
        "budget_s": args.budget,
        "sizes": {k: v for k, v in vars(sizes).items() if not k.endswith("estimate_s")},
    }
    journal = Journal(output, header)
    bench.log(f"device: {device}; budget {args.budget:.0f} s; results: {output} (+ .jsonl)")
    pytorch, xgboost, status = [], [], 0
    for framework in frameworks:
        try:
            python = interpreter_for(framework, interpreters, journal)
            problem = problem_with(framework, python, cuda)
            if problem:
                raise RuntimeError(problem)
            env = dict(device_env, TOKENIZERS_PARALLELISM="false")
            if framework == "xgboost" and not has_modules(python, "scipy"):
                env["PYTHONPATH"] = str(SHIMS)  # see gpu_shims/scipy/__init__.py
                journal.add("setup", step="scipy", note=f"absent: {SHIMS} stands in")
            project = project_for(framework)
            if "PYTHONPATH" in env:
                env["PYTHONPATH"] += os.pathsep + str(project)
            target = Target(python, project, env, device)
            journal.add("setup", step=f"{framework} versions", versions=bench.versions(python))
            if framework == "pytorch":
                cases, info = prepare_pytorch(python, sizes, cuda, device_env, journal, budget)
                pytorch = [(case, target) for case in cases]
            else:
                cases = prepare_xgboost(python, sizes, cuda, journal, budget)
                xgboost = [(case, target) for case in cases]
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as error:
            journal.add("skipped", framework=framework, why=str(error)[-2000:])
            bench.log(f"{framework}: skipped: {str(error).splitlines()[0]}")
            status = 1
    targets = {id(case): target for case, target in pytorch + xgboost}
    groups = ordered([case for case, _ in pytorch], [case for case, _ in xgboost])

    def measure_case(case: Case, timeout: float) -> dict:
        return measure(case, timeout, targets[id(case)])

    run_cases(groups, args.repeats, budget, journal, measure_case)
    journal.add("end", seconds=round(args.budget - budget.left(), 1))
    bench.log(f"wrote {output} and {output.with_suffix('.jsonl')}")
    if output.resolve() == (BENCH / "results-gpu.json").resolve():
        update_readme(journal.document())
    return status


# ---------------------------------------------------------------------------------------------
# The README's GPU section


def render(document: dict) -> str:
    """The README's GPU section for a results document (``Journal.document()``)."""
    summary = header = document
    lines = [
        f"Measured {header['date']} on **{header['device']}**, `{header['mode']}` mode, "
        f"budget {header['budget_s']:.0f} s; {header['machine']['cores']} CPU cores "
        f"({header['machine']['cpu']}). Every record, with the device's name, is in "
        "`results-gpu.json` (and `.jsonl`).",
        "",
        "| Case | Median | Runs |",
        "|---|---|---|",
    ]
    for name, case in summary["cases"].items():
        lines.append(f"| {name} | {case['median']:.1f} {case['unit']} | {len(case['rates'])} |")
    lines += ["", "| Pair | Trainer ÷ bare loop |", "|---|---|"]
    for pair, entry in summary["trainer_over_bare"].items():
        lines.append(f"| {pair} | **{entry['trainer_over_bare']:.3f}×** |")
    skipped = [r for r in document["records"] if r["kind"] in ("skipped", "failed")]
    for record in skipped:
        what = record.get("case") or record.get("framework")
        lines.append(f"\n{record['kind']}: {what}: {record.get('why') or record.get('error')}")
    return "\n".join(lines)


def update_readme(document: dict) -> None:
    if not document["cases"]:
        return
    readme = BENCH / "README.md"
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        bench.log("README.md has no GPU markers: not updated")
        return
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    readme.write_text(f"{head}{README_START}\n{render(document)}\n{README_END}{tail}")


if __name__ == "__main__":
    sys.exit(main())
