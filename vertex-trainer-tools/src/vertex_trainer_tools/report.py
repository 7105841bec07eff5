"""What a job's VM-hours bought: ``make report`` (``vertex-tools report [--job JOB]``).

Reads the job ledger that every replica of every attempt writes beside the checkpoints
(``vertex_trainer_runtime.ledger``: ``<job>/checkpoints/ledger/``, a local job folder or a Vertex
job's ``gs://`` output directory) and prints, per attempt of each replica and for the whole job:
the wall time, start-up (interpreter, imports, data, model, restore), compiling or warm-up,
productive training, evaluation, checkpoint stalls, waiting for peers, lost work (the steps a
restart computed again, and their time), the rest, and the gap before the next attempt. Then
goodput = productive / paid, in VM-hours (and GPU-hours, from ``vertex.yaml``'s pools). A PNG
timeline goes beside it (``--png``; default ``<job>/report.png``).

The accounting and its definitions are the runtime's (``vertex_trainer_runtime.goodput``), so
that the chief's end-of-run figures and this report agree.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from vertex_trainer_runtime import goodput
from vertex_trainer_runtime.ledger import FOLDER

from vertex_trainer_tools import contract
from vertex_trainer_tools.errors import FAILED, ToolError


def read_ledger(job: str, storage=None) -> goodput.Ledger:
    """Every record of the job's ledger, by replica and attempt; one line when there is none.
    ``storage``: makes the Cloud Storage client, for a ``gs://`` job."""
    folder = _ledger_folder(job)
    if folder.startswith("gs://"):
        found = goodput.parse(_bucket_texts(folder, storage()))
    elif not Path(folder).is_dir():
        raise ToolError(
            f"{job}: no job ledger ({folder} does not exist): the job ran before the "
            "ledger, or its trainer set VERTEX_TRAINER_LEDGER_SECONDS=0"
        )
    else:
        found = goodput.read_folder(folder)
    if not found.attempts:
        raise ToolError(f"{job}: the job ledger {folder} holds no records")
    return found


def _ledger_folder(job: str) -> str:
    base = job.rstrip("/")
    if base.startswith("gs://"):
        return f"{base}/{contract.CHECKPOINT_SUBDIR}/{FOLDER}"
    return str(Path(base) / contract.CHECKPOINT_SUBDIR / FOLDER)


def _bucket_texts(folder: str, client) -> dict[str, bytes]:
    from google.api_core import exceptions

    bucket_name, _, prefix = folder[len("gs://") :].partition("/")
    try:
        blobs = list(client.list_blobs(bucket_name, prefix=f"{prefix}/"))
        return {PurePosixPath(b.name).name: b.download_as_bytes() for b in blobs}
    except exceptions.GoogleAPICallError as error:
        raise ToolError(f"cannot read {folder}: {error.message}", exit_code=FAILED) from None


# ---------------------------------------------------------------------------------------------
# The whole job, in text and as a timeline.


def accelerators_by_pool(cfg) -> dict[str, int]:
    """``workerpoolN`` -> its GPUs per VM, from ``vertex.yaml``'s pools."""
    return {f"workerpool{n}": pool.accelerator_count for n, pool in enumerate(cfg.job.all_pools)}


def lines(job: str, ledger: goodput.Ledger, totals: dict) -> list[str]:
    """The report as text: one row per attempt of each replica, then the job's totals."""
    head = (
        f"Job {job}: {totals['replicas']} replica(s), {totals['attempts']} attempt(s) of the "
        f"chief, {totals['wall_seconds']:.1f} s from the first start to the last end"
    )
    width = max(len(a.replica) for a in ledger.attempts)
    headings = "".join(f" {heading:>10}" for heading in goodput.HEADINGS)
    header = f"{'replica':<{width}}  #  {'wall':>8}" + headings
    rows = [head, header + f" {'other':>8}  then"]
    number: dict[str, int] = {}
    for attempt in ledger.attempts:
        number[attempt.replica] = number.get(attempt.replica, 0) + 1
        s = attempt.seconds
        cells = "".join(f" {s[c]:>9.1f}s" for c in goodput.CATEGORIES[:-2])
        lost = f"{s['lost']:.1f}s/{attempt.lost_steps}st"
        then = attempt.ended + (f", gap {attempt.gap:.1f} s" if attempt.gap is not None else "")
        rows.append(
            f"{attempt.replica:<{width}}  {number[attempt.replica]}  "
            f"{attempt.end - attempt.start:>7.1f}s{cells} {lost:>10} {s['other']:>7.1f}s  {then}"
        )
    paid = totals["paid_seconds"]
    rows.append(
        f"Paid: {paid / 3600:.4f} VM-hours ({paid:.1f} s over {totals['replicas']} VM(s))"
        + (f", {totals['gpu_seconds'] / 3600:.4f} GPU-hours" if totals["gpu_seconds"] else "")
        + f"; productive {totals['seconds']['productive']:.1f} s: goodput "
        f"{100 * totals['goodput']:.1f} %"
    )
    rows.append(
        f"Lost work: {totals['lost_steps']} step(s) computed again after restarts "
        f"({totals['seconds']['lost']:.1f} s); restart gaps {totals['gap_seconds']:.1f} s"
    )
    if totals["model_flops"]:
        per_attempt = ", ".join(f"{a.flops:.3g}" for a in ledger.attempts if a.flops)
        rows.append(f"Model FLOPs: {totals['model_flops']:.3g} ({per_attempt} by attempt)")
    rows_seen = [r for a in ledger.attempts for r in a.of("work") if "rows" in r]
    if rows_seen and totals["seconds"]["productive"] > 0:
        rounds = sum(
            int(r["last_step"]) - int(r["first_step"]) + 1
            for a in ledger.attempts
            if a.replica == "workerpool0-0"
            for r in a.of("steps")
        )
        rate = int(rows_seen[-1]["rows"]) * rounds / totals["seconds"]["productive"]
        rows.append(
            f"Work: {rate:.3g} rows x rounds per productive second (MFU does not apply to "
            "boosted trees: their work is not matrix FLOPs)"
        )
    if ledger.skipped_lines:
        rows.append(f"({ledger.skipped_lines} torn or unreadable ledger line(s) skipped)")
    return rows


COLORS = {
    "startup": "#9e9e9e",
    "steps": "#2e7d32",
    "lost": "#c62828",
    "evaluation": "#1565c0",
    "checkpoint": "#ef6c00",
    "peer_wait": "#f9a825",
}


def timeline(ledger: goodput.Ledger, path: Path) -> None:
    """One lane per replica: attempts, start-up, steps (lost ones red), evaluations,
    checkpoints, waits, preemption notices and exits, in seconds since the job's start."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
    from matplotlib.patches import Patch

    zero = min(a.start for a in ledger.attempts)
    replicas = sorted({a.replica for a in ledger.attempts})
    figure, axes = pyplot.subplots(figsize=(11, 1.2 + 0.8 * len(replicas)))
    for attempt in ledger.attempts:
        lane = replicas.index(attempt.replica)

        def bar(start, seconds, color, height=0.5, lane=lane):
            axes.broken_barh([(start - zero, seconds)], (lane - height / 2, height), color=color)

        bar(attempt.start, attempt.end - attempt.start, "#eeeeee", 0.7)
        training = attempt.training_start
        if training:
            bar(attempt.start, training["time"] - attempt.start, COLORS["startup"])
        for record in attempt.of("steps"):
            seconds = float(record["seconds"])
            bar(record["time"] - seconds, seconds, COLORS["steps"])
        if attempt.seconds.get("lost") and attempt.of("steps"):
            last = attempt.of("steps")[-1]["time"]
            bar(last - attempt.seconds["lost"], attempt.seconds["lost"], COLORS["lost"], 0.3)
        for record in attempt.of("pause") + attempt.of("peer_wait"):
            kind = record.get("kind", "peer_wait")
            color = COLORS.get(kind, COLORS["checkpoint"])
            bar(record["time"] - float(record["seconds"]), float(record["seconds"]), color, 0.6)
        for notice in attempt.of("preemption_notice"):
            axes.plot(notice["time"] - zero, lane + 0.45, "v", color="black")
        axes.plot(attempt.end - zero, lane, "x", color="black")
        axes.annotate(attempt.ended.split(" (")[0], (attempt.end - zero, lane - 0.45), fontsize=7)
    axes.set_yticks(range(len(replicas)), replicas)
    axes.set_xlabel("seconds since the job's first start")
    axes.set_ylim(-0.8, len(replicas) - 0.2)
    legend = [Patch(color=c, label=k.replace("_", " ")) for k, c in COLORS.items()]
    axes.legend(handles=legend, loc="upper center", ncol=6, fontsize=7, bbox_to_anchor=(0.5, 1.25))
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)


def command(args) -> int:
    """``vertex-tools report``: the job's text report, and its timeline as a PNG."""
    from vertex_trainer_tools import config as config_lib
    from vertex_trainer_tools.cloud import Clients
    from vertex_trainer_tools.local_run import folders

    job = args.job or folders.LATEST
    if job == folders.LATEST:
        latest = folders.read_latest(args.jobs_root)
        if latest is None:
            raise ToolError(
                f"no job to report on: {Path(args.jobs_root) / folders.LATEST} does not exist "
                "(run make train-local, or JOB=gs://<base_output_dir>/<job>)"
            )
        job = str(latest)
    elif not job.startswith("gs://") and not Path(job).is_dir():
        raise ToolError(
            f"JOB: {job!r} is neither a job folder nor a gs:// job output directory "
            f"(e.g. JOB={Path(args.jobs_root) / folders.LATEST})"
        )
    cfg = config_lib.load(args.config)
    ledger = read_ledger(job, lambda: Clients(cfg).storage())
    goodput.account(ledger)
    # GPU-hours of a Vertex job, from its pools; a local job ran on this machine's.
    gpus = accelerators_by_pool(cfg) if job.startswith("gs://") else None
    totals = goodput.summary(ledger, gpus)
    print("\n".join(lines(job, ledger, totals)))
    png = Path(args.png) if args.png else _default_png(job)
    png.parent.mkdir(parents=True, exist_ok=True)
    timeline(ledger, png)
    print(f"Timeline: {png}")
    return 0


def _default_png(job: str) -> Path:
    if job.startswith("gs://"):
        return Path("build") / f"report-{PurePosixPath(job.rstrip('/')).name}.png"
    return Path(job) / "report.png"
