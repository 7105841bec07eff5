"""What a study folder shows: all trials as a table, the best trial's flags, a plot.

Written from the journal after every trial's end, so a study stopped at any moment still has
them: ``trials.csv`` (one row per trial), ``trials.md`` (the same, printed at the end),
``best.json`` (the best trial, its metric, its flags as ``job.args``, its model) and
``study.png`` (the metric per trial, and each parameter against the metric).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from vertex_trainer_tools.tune_local.journal import Journal, Trial

COMPLETED = ("SUCCEEDED", "STOPPED")


def best(journal: Journal, goal: str) -> Trial | None:
    """The completed trial with the best final measurement (the lowest id among equals)."""
    done = [t for t in journal.trials.values() if t.state in COMPLETED and t.final is not None]
    if not done:
        return None
    sign = 1 if goal == "maximize" else -1
    return max(sorted(done, key=lambda t: t.id), key=lambda t: sign * t.final)


def rows(journal: Journal, parameters) -> list[dict[str, str]]:
    table = []
    for trial in sorted(journal.trials.values(), key=lambda t: t.id):
        row = {"trial": str(trial.id), "state": trial.state}
        row["metric"] = "" if trial.final is None else f"{trial.final:.6g}"
        row.update({p.id: trial.values.get(p.id, "") for p in parameters})
        row["reports"] = str(len(trial.measurements))
        row["seconds"] = f"{trial.seconds:.1f}"
        row["note"] = trial.why
        table.append(row)
    return table


def markdown(table: list[dict[str, str]], metric: str) -> str:
    if not table:
        return "(no trials yet)\n"
    names = list(table[0])
    header = [metric if name == "metric" else name for name in names]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    cells = ([row[name].replace("|", "\\|") for name in names] for row in table)
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines) + "\n"


def job_args(trial: Trial) -> list[str]:
    return [f"--{name}={value}" for name, value in trial.values.items()]


def write(journal: Journal, hpt, png: bool = True) -> Trial | None:
    """(Re)write the tables, best.json and the plot; return the best trial."""
    folder = journal.folder
    table = rows(journal, hpt.parameters)
    if table:
        with _replacing(folder / "trials.csv") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(table[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(table)
    with _replacing(folder / "trials.md") as handle:
        handle.write(markdown(table, hpt.metric_id))
    top = best(journal, hpt.goal)
    if top is not None:
        summary = {
            "trial": top.id,
            "metric": {hpt.metric_id: top.final},
            "goal": hpt.goal,
            "values": top.values,
            "job_args": job_args(top),
            "model_dir": str(folder / "trials" / str(top.id) / str(top.id) / "model"),
        }
        with _replacing(folder / "best.json") as handle:
            json.dump(summary, handle, indent=2)
            handle.write("\n")
    if png and table:
        plot(journal, hpt, folder / "study.png")
    return top


class _replacing:
    """Write ``path`` through a temporary file renamed over it: readers never see half."""

    def __init__(self, path: Path):
        self.path, self.temporary = path, path.with_name(f".{path.name}.{os.getpid()}")

    def __enter__(self):
        self.handle = open(self.temporary, "w", encoding="utf-8", newline="")
        return self.handle

    def __exit__(self, kind, value, traceback):
        self.handle.close()
        if kind is None:
            os.replace(self.temporary, self.path)
        else:
            os.unlink(self.temporary)


def plot(journal: Journal, hpt, path: Path) -> None:
    """The metric per trial, then one panel per parameter: its value against the metric."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    trials = sorted(journal.trials.values(), key=lambda t: t.id)
    scored = [t for t in trials if t.final is not None]
    colors = {
        "SUCCEEDED": "tab:blue",
        "STOPPED": "tab:orange",
        "FAILED": "tab:red",
        "ACTIVE": "tab:gray",
    }
    panels = 2 + len(hpt.parameters)
    columns = min(panels, 3)
    lines = (panels + columns - 1) // columns
    figure, axes = plt.subplots(lines, columns, figsize=(4.2 * columns, 3.4 * lines), squeeze=False)
    flat = axes.ravel()
    first = flat[0]
    for state, color in colors.items():
        chosen = [t for t in scored if t.state == state]
        if chosen:
            first.scatter([t.id for t in chosen], [t.final for t in chosen], c=color, label=state)
    for trial in trials:
        if trial.final is None:
            first.axvline(trial.id, color=colors["FAILED"], alpha=0.3)
    first.set_xlabel("trial")
    first.set_ylabel(f"{hpt.metric_id} ({hpt.goal})")
    first.set_title(f"{hpt.display_name}: {len(trials)} trials")
    if scored:
        first.legend(fontsize="small")
    curves = flat[1]
    for trial in trials:
        if trial.measurements:
            steps = [m["step"] for m in trial.measurements]
            values = [m["value"] for m in trial.measurements]
            curves.plot(steps, values, color=colors.get(trial.state, "tab:gray"), alpha=0.7)
    curves.set_xlabel("step (global_step of each report)")
    curves.set_ylabel(hpt.metric_id)
    curves.set_title("reports per trial")
    for axis, parameter in zip(flat[2:], hpt.parameters, strict=False):
        xs = [t.values[parameter.id] for t in scored]
        if parameter.type != "categorical":
            xs = [float(x) for x in xs]
        axis.scatter(xs, [t.final for t in scored], c=[colors[t.state] for t in scored])
        axis.set_title(f"{parameter.id} ({parameter.type})")
        if parameter.scale == "log" and parameter.type != "categorical":
            axis.set_xscale("log")
            axis.xaxis.set_minor_formatter(NullFormatter())
        axis.set_xlabel(parameter.id)
        axis.set_ylabel(hpt.metric_id)
    for axis in flat[panels:]:
        axis.axis("off")
    figure.tight_layout()
    temporary = path.with_name(f".{path.name}.{os.getpid()}.png")
    figure.savefig(temporary, dpi=90)
    plt.close(figure)
    os.replace(temporary, path)
