"""``make tune-local``: vertex.yaml's study run here, each trial a job of the emulator.

The trials run a stand-in trainer written by this test (``STUDY_TRAINER``): it reports a score
that its flags decide at each step, in cloudml-hypertune's file format, checkpoints each step
and resumes from it, and records each start. So these tests can count exactly: a grid covers
every point once, failures stop the study at the allowed number, the median rule stops the
trials that fall behind, and a study killed mid-trial reruns nothing that had finished.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import PROJECT
from vertex_trainer_tools.experiments_stand_in import ExperimentsServer
from vertex_trainer_tools.local_run.job import trial_values
from vertex_trainer_tools.local_run.launcher import HOOKS_ENV
from vertex_trainer_tools.study import HptConfig
from vertex_trainer_tools.testing import HOOKS_DIR
from vertex_trainer_tools.tune_local import journal as journal_lib
from vertex_trainer_tools.tune_local import measurements, space

STUDY_TRAINER = r'''
"""A stand-in trainer for study tests: its score is decided by its flags."""
import argparse, json, os, signal, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, default=0.5)
parser.add_argument("--n", type=int, default=1)
parser.add_argument("--kind", default="a")
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--step-seconds", type=float, default=0.05)
parser.add_argument("--fail-below", type=float, default=-1.0)  # exit 1 when x is below
parser.add_argument("--silent-above", type=float, default=2.0)  # report nothing when x is above
parser.add_argument("--state", required=True)
parser.add_argument("--track", action="store_true")  # to the run the study names, if any
args, _ = parser.parse_known_args()

trial = json.loads(os.environ["CLUSTER_SPEC"])["task"]["trial"]
with open(os.path.join(args.state, f"trial-{trial}.starts"), "a") as handle:
    handle.write(f"{os.getpid()}\n")
if args.x < args.fail_below:
    sys.exit(1)
progress = os.path.join(os.environ["AIP_CHECKPOINT_DIR"], "step")
os.makedirs(os.path.dirname(progress), exist_ok=True)
start = int(open(progress).read()) if os.path.exists(progress) else 0
with open(os.path.join(args.state, f"trial-{trial}.resumed"), "a") as handle:
    handle.write(f"{start}\n")
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
path, reports = os.environ["CLOUD_ML_HP_METRIC_FILE"], []
os.makedirs(os.path.dirname(path), exist_ok=True)
quality = 1.0 - (args.x - 0.7) ** 2 + 0.01 * args.n + (0.02 if args.kind == "b" else 0.0)
for step in range(start + 1, args.steps + 1):
    time.sleep(args.step_seconds)
    if args.x <= args.silent_above:
        reports.append({"score": str(quality * step / args.steps), "checkpoint_path": "",
                        "global_step": str(step), "timestamp": time.time(), "trial": trial})
        with open(path, "w") as handle:  # as cloudml-hypertune: the whole file, each report
            handle.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in reports[-100:]))
    with open(progress + ".tmp", "w") as handle:
        handle.write(str(step))
    os.replace(progress + ".tmp", progress)
    if stopping:
        sys.exit(143)
if args.track:
    from vertex_trainer_runtime import tracking

    tracker = tracking.start(args, is_chief=True, trial=trial)
    tracker.finish({"score": quality})
'''

PARAMETERS = {
    "x": {"type": "double", "min": 0.1, "max": 0.9, "scale": "linear"},
    "n": {"type": "integer", "min": 1, "max": 3, "scale": "linear"},
    "kind": {"type": "categorical", "values": ["a", "b"]},
}


@pytest.fixture
def study(tmp_path, monkeypatch):
    """A project config whose study the stand-in trainer runs; returns a function that runs
    ``vertex-tools tune-local`` in a subprocess with an hpt section of its own."""
    (tmp_path / "study_trainer.py").write_text(STUDY_TRAINER)
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))

    def configure(job=None, **hpt):
        data = yaml.safe_load((PROJECT / "vertex.yaml").read_text())
        data["job"].update(job or {})
        data["hpt"] = {
            "display_name": "study-test",
            "metric": {"id": "score", "goal": "maximize"},
            "parameters": PARAMETERS,
            "max_trial_count": 4,
            "parallel_trial_count": 2,
            "max_failed_trial_count": 0,
            "algorithm": "random",
            "measurement_selection": "last",
            **hpt,
        }
        config = tmp_path / "vertex.yaml"
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        return config

    def run(*options, trainer=(), background=False, job=None, **hpt):
        config = configure(job, **hpt)
        command = [sys.executable, "-m", "vertex_trainer_tools", "tune-local"]
        command += [f"--config={config}", "--module=study_trainer"]
        command += [f"--studies-root={tmp_path / 'studies'}", *options]
        command += ["--", f"--state={state}", *trainer]
        if background:
            return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return subprocess.run(command, capture_output=True, text=True, timeout=600)

    run.state, run.root = state, tmp_path / "studies"
    return run


def latest(root: Path) -> journal_lib.Journal:
    return journal_lib.read((root / "latest").resolve())


def starts(state: Path, trial: int) -> int:
    path = state / f"trial-{trial}.starts"
    return len(path.read_text().split()) if path.exists() else 0


def test_random_trials_are_train_local_trials_and_the_best_is_reported(study):
    done = study("--trials=3")
    assert done.returncode == 0, done.stdout + done.stderr
    journal = latest(study.root)
    hpt = HptConfig(
        display_name="s", metric={"id": "score", "goal": "maximize"}, parameters=PARAMETERS
    )
    for trial in journal.trials.values():
        assert trial.values == trial_values(hpt.parameters, trial.id)  # make train-local HPT_TRIAL
        assert trial.state == "SUCCEEDED" and len(trial.measurements) == 3
        assert trial.final == trial.measurements[-1]["value"]  # measurement_selection: last
    best = json.loads((journal.folder / "best.json").read_text())
    top = max(journal.trials.values(), key=lambda t: t.final)
    assert best["trial"] == top.id
    assert best["job_args"] == [f"--{k}={v}" for k, v in top.values.items()]
    assert f"best: trial {top.id}" in done.stdout
    assert (journal.folder / "study.png").stat().st_size > 10_000
    rows = (journal.folder / "trials.csv").read_text().splitlines()
    assert rows[0].startswith("trial,state,metric,x,n,kind") and len(rows) == 4
    # Each trial is a job folder of the emulator, with the trial's own <id>/ outputs.
    assert (journal.folder / "trials" / "2" / "2" / "hypertune").is_dir()


def test_a_grid_runs_every_point_once_first_parameter_fastest(study):
    grid = {"n": PARAMETERS["n"], "kind": PARAMETERS["kind"]}
    done = study("--trials=10", "--parallel=2", algorithm="grid", parameters=grid)
    assert done.returncode == 0, done.stdout + done.stderr
    journal = latest(study.root)
    points = [
        (t.values["n"], t.values["kind"])
        for t in sorted(journal.trials.values(), key=lambda t: t.id)
    ]
    assert points == [(n, kind) for kind in "ab" for n in "123"]
    assert all(starts(study.state, trial) == 1 for trial in journal.trials)


def test_failed_trials_stop_the_study_at_the_allowed_count(study):
    # x below 0.5 exits 1, above 0.6 reports no metric: both are failed trials.
    done = study(
        "--trials=8",
        "--parallel=1",
        trainer=["--fail-below=0.5", "--silent-above=0.6"],
        max_failed_trial_count=2,
        parameters={"x": {"type": "discrete", "values": [0.2, 0.55, 0.8, 0.85]}},
        algorithm="grid",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "ERROR: the study stopped after 2 failed trials: hpt.max_failed_trial_count is 2"
        in done.stderr
    )
    journal = latest(study.root)
    states = {t.id: (t.state, t.why) for t in journal.trials.values()}
    assert states[1] == ("FAILED", "local-run exited 1")
    assert states[2][0] == "SUCCEEDED"
    assert states[3] == ("FAILED", "it reported no score (hypertune)")
    assert len(states) == 3


def test_the_median_rule_stops_trials_that_fall_behind(study):
    # Three good trials complete first (one at a time); then the bad ones are stopped early.
    values = ["0.7", "0.69", "0.71", "0.1", "0.12"]
    done = study(
        "--parallel=1",
        trainer=["--steps=8", "--step-seconds=0.4"],
        max_trial_count=5,
        parallel_trial_count=1,
        algorithm="grid",
        early_stopping="median",
        measurement_selection="best",
        parameters={"x": {"type": "categorical", "values": values}},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    journal = latest(study.root)
    trials = sorted(journal.trials.values(), key=lambda t: t.id)
    assert [t.state for t in trials[:3]] == ["SUCCEEDED"] * 3
    for trial in trials[3:]:
        assert trial.state == "STOPPED", trial
        assert 1 <= len(trial.measurements) < 8 and trial.final is not None
        assert "worse than the median" in trial.why
    assert "trial 4 stops early" in done.stdout


def test_a_killed_study_resumes_without_rerunning_finished_trials(study):
    process = study(
        "--trials=3",
        "--parallel=1",
        trainer=["--steps=40", "--step-seconds=0.1"],
        background=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # kill it inside trial 2, once trial 1 has finished
        try:
            journal = latest(study.root)
        except (ValueError, OSError):
            journal = None
        progress = (
            study.state.parent
            / "studies"
            / "latest"
            / "trials"
            / "2"
            / "2"
            / "checkpoints"
            / "step"
        )
        if (
            journal
            and journal.trials.get(1)
            and journal.trials[1].state == "SUCCEEDED"
            and progress.exists()
        ):
            if int(progress.read_text() or 0) >= 5:
                break
        time.sleep(0.2)
    process.kill()
    process.wait()
    deadline = time.monotonic() + 60  # the trial's local-run is told to stop with its study
    while time.monotonic() < deadline and _alive(study.state, 2):
        time.sleep(0.5)
    assert not _alive(study.state, 2)
    assert latest(study.root).trials[2].state == "ACTIVE"

    done = study("--study=latest", trainer=["--steps=40", "--step-seconds=0.1"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 finished trials kept" in done.stdout
    journal = latest(study.root)
    assert [t.state for t in journal.trials.values()] == ["SUCCEEDED"] * 3
    assert starts(study.state, 1) == 1  # 0 finished trials run again
    resumed = (study.state / "trial-2.resumed").read_text().split()
    assert resumed[0] == "0" and int(resumed[-1]) >= 5  # trial 2 went on from its checkpoint


def test_with_an_experiment_each_trial_is_a_run_of_it(study, monkeypatch):
    job = {
        "experiment": "study-runs",
        "service_account": "trainer@demo-project.iam.gserviceaccount.com",
    }
    with ExperimentsServer(experiments=("study-runs",)) as server:
        monkeypatch.setenv("VERTEX_API_ENDPOINT", server.url)
        monkeypatch.setenv(HOOKS_ENV, str(HOOKS_DIR))  # the drills' hooks send trials there
        done = study("--trials=2", trainer=["--track"], job=job)
        assert done.returncode == 0, done.stdout + done.stderr
        journal = latest(study.root)
        for trial in journal.trials.values():
            logged = server.store.run("study-runs", f"{journal.folder.name}-{trial.id}")
            assert logged["_params"]["x"] == float(trial.values["x"]), logged
            assert logged["_metrics"]["final_score"] == pytest.approx(trial.final)
            assert logged["_state"] == "COMPLETE"


def _alive(state: Path, trial: int) -> bool:
    pids = (state / f"trial-{trial}.starts").read_text().split()
    for pid in pids:
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            continue
        status = Path(f"/proc/{pid}/stat").read_text().split()[2]
        if status != "Z":
            return True
    return False


def test_a_resumed_study_is_the_same_study(study):
    assert study("--trials=1").returncode == 0
    changed = study("--study=latest", max_trial_count=5)
    assert changed.returncode == 2
    assert "hpt.max_trial_count changed since this study began" in changed.stderr
    missing = study("--study=latest-but-missing")
    assert "is not a study folder (e.g. STUDY=latest)" in missing.stderr


def test_a_study_folder_is_held_by_one_study(study, tmp_path):
    folder = tmp_path / "held"
    folder.mkdir()
    held = journal_lib.lock(folder)
    try:
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                "from vertex_trainer_tools.tune_local import journal; "
                f"journal.lock({str(folder)!r})",
            ],
            capture_output=True,
            text=True,
        )
        assert f"this study is running in process {os.getpid()}" in child.stderr
    finally:
        held.close()


# --- the parts, without processes -------------------------------------------------------------


def test_grid_points_cover_the_product_first_parameter_fastest():
    hpt = HptConfig(
        display_name="s",
        metric={"id": "score", "goal": "maximize"},
        parameters={"n": PARAMETERS["n"], "d": {"type": "discrete", "values": [32, 64]}},
        algorithm="grid",
    )
    points = space.grid_points(hpt.parameters)
    assert points[:4] == [
        {"n": "1", "d": "32.0"},
        {"n": "2", "d": "32.0"},
        {"n": "3", "d": "32.0"},
        {"n": "1", "d": "64.0"},
    ]
    assert len(points) == space.grid_size(hpt.parameters) == 6
    assert space.Suggester(hpt).suggest(7, []) is None  # exhausted


def test_bayesian_suggestions_stay_in_the_space_in_vertex_formats():
    parameters = {
        **PARAMETERS,
        "lr": {"type": "double", "min": 1e-4, "max": 1e-1, "scale": "reverse_log"},
        "bs": {"type": "discrete", "values": [16, 32, 64]},
    }
    hpt = HptConfig(
        display_name="s",
        metric={"id": "score", "goal": "minimize"},
        parameters=parameters,
        algorithm="bayesian",
        max_trial_count=12,
    )
    suggester, history = space.Suggester(hpt, seed=5), []
    for number in range(1, 13):
        values = suggester.suggest(number, history)
        assert 0.1 <= float(values["x"]) <= 0.9 and values["n"] in ("1", "2", "3")
        assert values["kind"] in ("a", "b") and values["bs"] in ("16.0", "32.0", "64.0")
        assert 1e-4 <= float(values["lr"]) <= 1e-1
        state = "ACTIVE" if number % 4 == 0 else "SUCCEEDED"
        history.append({"values": values, "state": state, "final": float(values["x"])})
    # Once past its random start, TPE proposes more of the low x that scored best.
    late = [float(h["values"]["x"]) for h in history[6:]]
    assert sum(late) / len(late) < 0.5


def test_median_rule_on_running_averages_of_completed_trials():
    def curve(*values):
        return [{"step": step, "value": v, "time": step} for step, v in enumerate(values, 1)]

    completed = [curve(0.5, 0.7, 0.9), curve(0.4, 0.6, 0.8), curve(0.6, 0.8, 1.0)]
    # At step 2 the running averages are 0.6, 0.5, 0.7: the median is 0.6.
    assert measurements.median_says_stop(curve(0.5, 0.59), completed, "maximize")
    assert not measurements.median_says_stop(curve(0.5, 0.6), completed, "maximize")  # not strictly
    assert not measurements.median_says_stop(curve(0.5, 0.59), completed[:2], "maximize")  # too few
    assert measurements.median_says_stop(curve(0.7, 0.61), completed, "minimize")
    assert not measurements.median_says_stop([], completed, "maximize")


SPEC = {"hpt": {}, "trials": 1, "parallel": 1, "trainer_args": [], "module": "m", "seed": 1}


def test_a_torn_journal_line_is_dropped_and_the_next_record_starts_clean(tmp_path):
    journal = journal_lib.Journal(tmp_path)
    journal.start(SPEC)
    journal.append({"event": "trial", "id": 1, "values": {"x": "0.5"}})
    with open(journal.path, "a") as handle:
        handle.write('{"event": "end", "id": 1, "sta')
    again = journal_lib.read(tmp_path)
    assert again.trials[1].state == "ACTIVE"
    again.append({"event": "end", "id": 1, "state": "SUCCEEDED", "final": 1.0})
    assert journal_lib.read(tmp_path).trials[1].state == "SUCCEEDED"
    with pytest.raises(ValueError, match="no study here"):
        journal_lib.read(tmp_path / "nothing")


def test_reports_are_read_as_hypertune_writes_them(tmp_path):
    path = tmp_path / "output.metrics"
    lines = [
        {"score": "0.5", "global_step": "1", "timestamp": 1.0},
        {"score": "nan", "global_step": "2", "timestamp": 2.0},
        {"other": "0.9", "global_step": "3", "timestamp": 3.0},
        {"score": "0.7", "global_step": "4", "timestamp": 4.0},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"score": "0.')
    reports = measurements.read_reports(str(path), "score")
    assert [(r["step"], r["value"]) for r in reports] == [(1, 0.5), (4, 0.7)]
    assert measurements.newer(reports, reports[:1]) == reports[1:]
    assert measurements.final(reports, "best", "minimize") == 0.5


def test_a_damaged_journal_loses_its_damaged_records_only(tmp_path, study):
    journal = journal_lib.Journal(tmp_path)
    journal.start(SPEC)
    journal.append({"event": "trial", "id": 1, "values": {"x": "0.5"}})
    with open(journal.path, "a") as handle:  # records damaged by hand, each a JSON line
        for damaged in (
            {"event": "report", "id": 1, "step": "two", "value": 0.5, "time": 1.0},
            {"event": "end", "id": 1, "state": "WEIRD", "final": 1.0},
            {"event": "trial", "id": 2},
            [1, 2],
        ):
            handle.write(json.dumps(damaged) + "\n")
    journal.append({"event": "report", "id": 1, "step": 2, "value": 0.5, "time": 2.0})
    again = journal_lib.read(tmp_path)
    assert list(again.trials) == [1] and again.trials[1].state == "ACTIVE"
    assert again.trials[1].measurements == [{"step": 2, "value": 0.5, "time": 2.0}]
    # A study folder whose spec is damaged is one line, never a traceback.
    (tmp_path / "journal.jsonl").write_text('{"event": "study", "spec": {"hpt": 1}}\n')
    done = study(f"--study={tmp_path}")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "journal.jsonl does not begin with the study's spec" in done.stderr


def test_a_trial_whose_job_record_is_damaged_runs_again(study):
    assert study("--trials=1").returncode == 0
    folder = (study.root / "latest").resolve()
    lines = (folder / "journal.jsonl").read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["event"] != "end"]  # as if killed
    (folder / "journal.jsonl").write_text("\n".join(kept) + "\n")
    (folder / "trials" / "1" / "local_run.json").write_text("{not json")
    done = study("--study=latest")
    assert done.returncode == 0, done.stdout + done.stderr
    assert latest(study.root).trials[1].state == "SUCCEEDED"
    assert starts(study.state, 1) == 2
