"""Turn ``results.json`` into the table in ``README.md`` and the plot ``results.png``.

``python bench/report.py [results.json]``; ``run.py`` calls it at the end. The README text
between the two ``bench:results`` markers is replaced; everything else is left alone.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
START = "<!-- bench:results:start -->"
END = "<!-- bench:results:end -->"


def fmt(value, digits: int = 2, suffix: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}{suffix}"


def spread(values) -> str:
    return f" ({values[0]:.2f}–{values[1]:.2f})" if values else ""


def checkpoint_seconds(value: float) -> str:
    """Below 0.01 s the difference of two medians is noise (it can even come out negative)."""
    return "≈ 0 s" if value < 0.01 else f"{value:.2f} s"


def ratio_cell(entry: dict) -> str:
    """``0.97× (0.93–1.01); wall 0.91× (0.70–1.20)``: CPU-time ratio, then wall-clock."""
    return (
        f"**{fmt(entry['ratio'])}×**{spread(entry['range'])}; "
        f"wall {fmt(entry['wall_ratio'])}×{spread(entry['wall_range'])}"
    )


def main_table(results: dict) -> list[str]:
    lines = [
        "| Variant | Overhead ratio (trainer ÷ bare loop) | Speed-up vs sample pattern "
        "| Checkpoint cost (time, default ÷ none) | Start-up to first step: trainer / bare "
        "/ sample | Throughput: trainer / bare / sample | Bake | Project test suite |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, v in results["variants"].items():
        cases = v["cases"]
        throughput = " / ".join(
            fmt(cases[c]["throughput"], 1) if c in cases else "–"
            for c in ("trainer", "bare", "sample")
        )
        if v.get("sample_pattern"):
            sample = f"{ratio_cell(v['speedups'][v['sample_pattern']])} ({v['sample_pattern']})"
        else:
            sample = "n/a (no sample pattern)"
        startup = " / ".join(
            f"{fmt(v['startup_s'][c], 1, ' s')} ({fmt(v['startup_cpu_s'][c], 1, ' s CPU')})"
            if c in v["startup_s"]
            else "–"
            for c in ("trainer", "bare", "sample")
        )
        suite = "not run"
        if v["test_suite_s"]:
            suite = f"{fmt(v['test_suite_s'], 0, ' s')} ({v.get('test_suite', '')})"
        lines.append(
            f"| {name} | {ratio_cell(v['overhead'])} | {sample} | {ratio_cell(v['checkpoint'])}"
            f"; {checkpoint_seconds(v['checkpoint_cpu_s_each'])} CPU per checkpoint "
            f"| {startup} | {throughput} {v['throughput_unit']} | {fmt(v['bake_s'], 1, ' s')} "
            f"| {suite} |"
        )
    return lines


def speedup_table(results: dict) -> list[str]:
    lines = [
        "| Variant | Compared | Ratio: CPU time (range); wall clock (range) |",
        "|---|---|---|",
    ]
    for name, v in results["variants"].items():
        lines.append(
            f"| {name} | trainer with checkpoints off ÷ bare loop "
            f"| {ratio_cell(v['overhead_no_checkpoint'])} |"
        )
        for label, entry in v.get("overheads", {}).items():
            lines.append(f"| {name} | trainer ÷ bare loop: {label} | {ratio_cell(entry)} |")
        for label, entry in v.get("speedups", {}).items():
            lines.append(f"| {name} | trainer ÷ sample pattern: {label} | {ratio_cell(entry)} |")
    return lines


def machine_lines(results: dict) -> list[str]:
    m = results["machine"]
    runs = results.get("runs") or [results]
    described = "; ".join(
        f"{r['date']}, load average {r['load_average_start'][0]:.1f} at the start and "
        f"{r['load_average_end'][0]:.1f} at the end" + (f" ({r['note']})" if r.get("note") else "")
        for r in runs
    )
    lines = [
        f"- `{results['mode']}` mode, {len(runs)} run(s) pooled, medians over all their "
        f"repeats: {described}. {results['total_s']:.0f} s in all. A shared machine: see the "
        "ranges.",
        f"- CPU: {m['cpu']}, {m['cores']} cores; memory {m['memory_gib']} GiB; no GPU; {m['os']}.",
    ]
    for name, v in results["variants"].items():
        versions = ", ".join(f"{k} {val}" for k, val in v["versions"].items())
        setup = ", ".join(f"{k} {val}" for k, val in v["setup"].items())
        data = ", ".join(f"{k} {val}" for k, val in v["data"].items())
        measured = f" Measured in a {v['measured']}." if v.get("measured") else ""
        lines.append(f"- {name}: {versions}. Setup: {setup}. Data: {data}.{measured}")
    return lines


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["variants"])
    variants = [results["variants"][n] for n in names]
    colours = {"overhead": "tab:blue", "sample": "tab:orange", "checkpoint": "tab:green"}
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), width_ratios=[3, 2])
    highest = 1.0
    for i, v in enumerate(variants):
        bars = [("overhead", "", v["overhead_ratio"])]
        for label, entry in v.get("speedups", {}).items():
            tokens = label.split(" to ")[-1] if " to " in label else ""
            bars.append(("sample", tokens, entry["ratio"]))
        bars.append(("checkpoint", "", v["checkpoint_time_ratio"]))
        width = 0.8 / len(bars)
        for k, (kind, note, value) in enumerate(bars):
            x = i - 0.4 + width * (k + 0.5)
            left.bar(x, value, width * 0.95, color=colours[kind])
            text = f"{value:.2f}" + (f"\n{note}" if note else "")
            left.annotate(text, (x, value), ha="center", va="bottom", fontsize=7)
            highest = max(highest, value)
    left.axhline(1.0, color="black", linewidth=0.8)
    left.axhline(0.95, color="grey", linewidth=0.8, linestyle="--")
    left.set_ylim(0, highest * 1.2)
    left.set_xticks(range(len(names)), names)
    left.set_ylabel("ratio of throughputs (work per CPU-second)")
    left.set_title("Ratios, medians of runs (dashed line: 0.95)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    labels = [
        "overhead: trainer ÷ bare loop",
        "speed-up: trainer ÷ sample pattern",
        "checkpoint cost: default ÷ none (time)",
    ]
    left.legend(handles, labels, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3)

    kinds = [("trainer", "generated trainer"), ("bare", "bare loop"), ("sample", "sample pattern")]
    width = 0.8 / len(kinds)
    for k, (key, label) in enumerate(kinds):
        values = [v["startup_s"].get(key) or 0 for v in variants]
        positions = [i + (k - 1) * width for i in range(len(names))]
        right.bar(positions, values, width, label=label)
    right.set_xticks(range(len(names)), names)
    right.set_ylabel("seconds")
    right.set_title("Process start to first training step")
    right.legend(fontsize=8)
    figure.suptitle(
        f"Generated trainers vs bare loops ({results['mode']} run, "
        f"{results['machine']['cores']} CPU cores, no GPU)"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def render(results: dict) -> str:
    lines = [
        START,
        "",
        "![ratios and start-up times](results.png)",
        "",
        *main_table(results),
        "",
        *speedup_table(results),
        "",
        "Each ratio, in bold: of median throughputs in work per CPU-second of the process (one "
        "compute thread), with in parentheses the smallest and largest ratio of two runs of "
        "one repeat; then the same for work per wall-clock second, which the other jobs on "
        "this shared machine disturb far more. Throughputs (table above) are per CPU-second.",
        "",
        *machine_lines(results),
        "",
        END,
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Render ``results.json`` into the README.md and results.png beside it.

    A results file outside ``bench/`` (a quick run's) gets its own copy of the README, so the
    committed full results are never overwritten by a smoke run.
    """
    argv = sys.argv[1:] if argv is None else argv
    source = Path(argv[0]) if argv else BENCH / "results.json"
    results = json.loads(source.read_text())
    folder = source.resolve().parent
    readme = folder / "README.md"
    if not readme.exists():
        shutil.copyfile(BENCH / "README.md", readme)
    plot(results, folder / "results.png")
    text = readme.read_text()
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    readme.write_text(head + render(results) + tail)
    print(f"updated {readme} and {folder / 'results.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
