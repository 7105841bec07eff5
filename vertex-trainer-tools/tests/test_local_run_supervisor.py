"""The local emulator: how it supervises replica processes (log prefixes, restarts, the kill
drill, timeouts, clean-up) and its command line end to end, with a tiny fake trainer."""

from __future__ import annotations

import importlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import PROJECT, install_fake_trainer
from vertex_trainer_tools import cli as tools_cli

job_spec = importlib.import_module("vertex_trainer_tools.local_run.job")
launcher = importlib.import_module("vertex_trainer_tools.local_run.launcher")
supervisor = importlib.import_module("vertex_trainer_tools.local_run.supervisor")
cli = importlib.import_module("vertex_trainer_tools.local_run.cli")
drills = importlib.import_module("vertex_trainer_tools.local_run.drill")
drill = importlib.import_module("vertex_trainer_tools.testing")
job_processes, runner_temp_dirs = drill.job_processes, drill.runner_temp_dirs


# --- supervising replica processes, with a fake trainer --------------------------------------


def alive(pid: int) -> bool:
    """True while ``pid`` exists and has not exited (a zombie, Z, or being reaped, X, has)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake trainer as module ``fake_trainer``, and a folder for what it records."""
    return install_fake_trainer(tmp_path, monkeypatch)


def starts(state: Path, name: str) -> int:
    path = state / f"{name}.starts"
    return len(path.read_text().split()) if path.exists() else 0


def supervise(tmp_path, state, sizes, fake_args, renew=False, **options):
    """Run a job of the fake trainer under the Supervisor; return (status, output, job)."""
    job = job_spec.make_job(sizes, str(tmp_path / "out"), args=["--state", str(state), *fake_args])
    envs = job_spec.environments(job)
    replicas = [
        supervisor.Replica(pool, index, list(job.args), envs[job_spec.replica_name(pool, index)])
        for pool, index in job.replicas
    ]
    if renew:
        options["renew_env"] = lambda: job_spec.environments(job.with_new_ports())
    out = io.StringIO()
    options.setdefault("grace", 1.0)
    options.setdefault("timeout", 60)
    processes = launcher.ProcessLauncher(module="fake_trainer", cwd=tmp_path)
    status = supervisor.Supervisor(
        replicas, processes, checkpoint_dir=job.checkpoint_dir, out=out, **options
    ).run()
    assert job_processes(job.job_id) == [], "replica processes were left behind"
    return status, out.getvalue(), job, {r.name: r for r in replicas}


def test_prefixes_lines_and_succeeds_when_the_chief_exits_0(tmp_path, fake):
    status, out, _, replicas = supervise(tmp_path, fake, [1, 1], ["--chief-needs=workerpool1-0:1"])
    assert status == 0
    assert "workerpool0-0 | hello from workerpool0-0 attempt 1" in out
    assert "workerpool1-0 | hello from workerpool1-0 attempt 1" in out
    assert "job SUCCEEDED" in out
    # The worker would sleep for an hour: it was stopped once the chief succeeded.
    assert replicas["workerpool1-0"].exit_code == -signal.SIGTERM
    assert "stopped: the job succeeded" in out


def test_a_failed_replica_is_rerun_from_the_start(tmp_path, fake):
    args = ["--fail=workerpool1-0:1:3", "--chief-needs=workerpool1-0:2"]
    status, out, _, replicas = supervise(tmp_path, fake, [1, 1], args)
    assert status == 0
    assert starts(fake, "workerpool1-0") == 2 and starts(fake, "workerpool0-0") == 1
    assert "workerpool1-0 exited 3; restart 1/5" in out
    assert replicas["workerpool1-0"].failures == 1


def test_restarts_are_bounded_then_the_job_fails_with_a_summary(tmp_path, fake):
    args = ["--fail=workerpool1-0:99:3", "--chief-seconds=3600"]
    started = time.monotonic()
    status, out, _, replicas = supervise(tmp_path, fake, [1, 1], args, max_restarts=2)
    assert status == 1
    assert starts(fake, "workerpool1-0") == 3, "1 run + 2 restarts"
    assert "job FAILED" in out
    assert "workerpool1-0 failed 3 times (limit: 2 restarts); last exit code 3" in out
    assert "last lines of workerpool1-0:" in out and "fails on purpose" in out
    assert replicas["workerpool0-0"].exit_code == -signal.SIGTERM
    assert time.monotonic() - started < 600, "waited for the chief's 3600 s sleep"


def test_bad_input_exit_code_2_is_not_retried(tmp_path, fake):
    status, out, _, _ = supervise(tmp_path, fake, [1], ["--fail=workerpool0-0:99:2"])
    assert status == 1 and starts(fake, "workerpool0-0") == 1
    assert "exited 2 (bad input or flags): not restarted" in out


def test_kill_drill_restarts_the_replica_once(tmp_path, fake):
    # The chief saves a checkpoint every 0.3 s and resumes; the kill lands 1 s into the job.
    args = ["--steps=8", "--grandchild-session"]
    status, out, _, replicas = supervise(
        tmp_path, fake, [1, 1], args, kill_after=1.0, kill_replica="workerpool0-0"
    )
    assert status == 0
    assert "kill drill: SIGKILL to workerpool0-0 after 1s" in out
    chief, worker = replicas["workerpool0-0"], replicas["workerpool1-0"]
    assert (chief.attempts, worker.attempts) == (2, 1)
    assert chief.failures == 0, "a preemption does not count against the restart limit"
    # Like a preempted VM, the drill killed the whole replica, children in other sessions too.
    pids = [int(path.read_text()) for path in fake.glob("workerpool0-0-*.grandchild")]
    assert pids and not any(alive(pid) for pid in pids)


@pytest.mark.parametrize("count", [1, 2])
def test_kill_at_checkpoint_resumes_from_the_newest_complete_one(tmp_path, fake, count):
    status, out, job, _ = supervise(
        tmp_path, fake, [1], ["--steps=5"], kill_at_checkpoint=count, kill_replica="workerpool0-0"
    )
    assert status == 0
    saved = ", ".join(f"checkpoint-{step}" for step in range(1, count + 1))
    assert f"kill drill: SIGKILL to workerpool0-0 after {saved} w" in out
    assert starts(fake, "workerpool0-0") == 2
    resumed = [line for line in out.splitlines() if "resuming from step" in line]
    assert resumed[0].endswith("step 0")
    assert int(resumed[1].split()[-1]) >= count, "the restart did not resume"
    assert sorted(n for n in os.listdir(job.checkpoint_dir) if n != "ledger")[-1] == "checkpoint-5"


def test_kill_at_checkpoint_n_counts_checkpoints_saved_not_present(tmp_path, fake):
    # The trainers keep only their newest two checkpoints: a drill counting the checkpoints
    # present at one time could never reach 4.
    status, out, _, _ = supervise(
        tmp_path,
        fake,
        [1],
        ["--steps=6", "--keep=2"],
        kill_at_checkpoint=4,
        kill_replica="workerpool0-0",
    )
    assert status == 0, out
    saved = ", ".join(f"checkpoint-{step}" for step in range(1, 5))
    assert f"kill drill: SIGKILL to workerpool0-0 after {saved} were saved" in out
    assert starts(fake, "workerpool0-0") == 2


def test_sigterm_drill_the_replica_saves_the_next_step_and_resumes_from_it(tmp_path, fake):
    # Compute Engine's shape: SIGTERM, a grace period, then SIGKILL. The fake chief saves the
    # step it is on when SIGTERM comes and exits 143; the worker trains on, untouched.
    status, out, job, replicas = supervise(
        tmp_path,
        fake,
        [1, 1],
        ["--steps=8", "--save-on-sigterm"],
        kill_at_checkpoint=2,
        kill_signal="TERM",
        kill_grace=20,
    )
    assert status == 0, out
    assert "kill drill: SIGTERM to workerpool0-0 after checkpoint-1, checkpoint-2 were" in out
    saved = [int(line.rsplit("-", 1)[1]) for line in out.splitlines() if "notice: saved" in line]
    assert len(saved) == 1 and saved[0] >= 3, out
    # Named last: a checkpoint of the regular cadence may complete beside it.
    assert re.search(rf"kill drill: (\S+, )*checkpoint-{saved[0]} complete [\d.]+s after", out)
    assert re.search(r"kill drill: workerpool0-0 exited 143 [\d.]+s after SIGTERM", out)
    assert "kill drill: workerpool0-0 still running" not in out
    chief, worker = replicas["workerpool0-0"], replicas["workerpool1-0"]
    assert (chief.attempts, worker.attempts, chief.failures) == (2, 1, 0)
    # Not a step lost: the rerun starts from the step the notice saved.
    assert f"resuming from step {saved[0]}" in out
    assert sorted(n for n in os.listdir(job.checkpoint_dir) if n != "ledger")[-1] == "checkpoint-8"


def test_sigterm_drill_sigkills_a_replica_still_running_after_the_grace_period(tmp_path, fake):
    status, out, _, replicas = supervise(
        tmp_path,
        fake,
        [1],
        ["--steps=40", "--ignore-sigterm"],
        kill_at_checkpoint=1,
        kill_signal="TERM",
        kill_grace=1,
    )
    assert status == 0, out
    assert "kill drill: workerpool0-0 still running 1s after SIGTERM: SIGKILL" in out
    assert replicas["workerpool0-0"].attempts == 2


def test_kill_signal_and_grace_flags():
    args = tools_cli.parse(
        ["local-run", "--kill-after=checkpoint", "--kill-signal=TERM", "--kill-grace=12"]
    )
    assert (args.kill_signal, args.kill_grace) == ("TERM", 12.0)
    defaults = tools_cli.parse(["local-run"])
    assert (defaults.kill_signal, defaults.kill_grace) == ("KILL", 30.0)
    with pytest.raises(SystemExit):
        tools_cli.parse(["local-run", "--kill-signal=INT"])
    with pytest.raises(ValueError, match="--kill-grace must be >= 0"):
        cli.build(
            tools_cli.parse(
                ["local-run", "--config", str(PROJECT / "vertex.yaml"), "--kill-grace=-1"]
            )
        )


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("12.5", ("seconds", 12.5)),
        ("checkpoint", ("checkpoints", 1)),
        ("checkpoint:2", ("checkpoints", 2)),
    ],
)
def test_kill_after_values(value, parsed):
    assert tools_cli.parse(["local-run", f"--kill-after={value}"]).kill_after == parsed


@pytest.mark.parametrize("value", ["-1", "soon", "checkpoint:0", "checkpoint:x"])
def test_kill_after_rejects_bad_values(value):
    with pytest.raises(SystemExit):
        tools_cli.parse(["local-run", f"--kill-after={value}"])


def test_restart_job_on_worker_restart_restarts_every_replica_on_fresh_ports(tmp_path, fake):
    # The worker fails once the chief runs; the whole job restarts, and the chief's rerun succeeds.
    args = ["--fail=workerpool1-0:1:3", "--worker-needs=workerpool0-0:1"]
    args += ["--chief-succeeds-on-attempt=2"]
    status, out, _, _ = supervise(
        tmp_path, fake, [1, 1], args, restart_job_on_worker_restart=True, renew=True
    )
    assert status == 0
    assert "restart_job_on_worker_restart: restarting every replica" in out
    assert starts(fake, "workerpool0-0") == 2 and starts(fake, "workerpool1-0") == 2

    def spec(name, attempt):
        env = json.loads((fake / f"{name}-{attempt}.json").read_text())["env"]
        return json.loads(env["CLUSTER_SPEC"])

    # A killed process leaves its ports in TIME_WAIT: the restarted job gets new ones, and
    # its replicas agree on them.
    assert spec("workerpool0-0", 2)["cluster"] == spec("workerpool1-0", 2)["cluster"]
    assert spec("workerpool0-0", 2)["cluster"] != spec("workerpool0-0", 1)["cluster"]
    assert spec("workerpool1-0", 2)["task"] == spec("workerpool1-0", 1)["task"]


@pytest.mark.slow  # make test-all: a timeout drill that sleeps through its timeout and grace
def test_timeout_sends_sigterm_then_sigkill_after_the_grace_period(tmp_path, fake):
    # The timeout leaves each replica's Python time to start and ignore SIGTERM even on a
    # loaded machine; a shorter one can send SIGTERM before that and the replica dies of it.
    args = ["--ignore-sigterm", "--chief-seconds=3600", "--grandchild"]
    started = time.monotonic()
    status, out, _, replicas = supervise(tmp_path, fake, [1, 1], args, timeout=5.0, grace=1.0)
    elapsed = time.monotonic() - started
    assert status == 124 and "job TIMED OUT" in out
    assert "still running after 1s: SIGKILL" in out
    assert all(r.exit_code == -signal.SIGKILL for r in replicas.values())
    assert 6.0 <= elapsed < 600, "timeout + grace, far less than the chief's 3600 s sleep"
    for pid_file in fake.glob("*.grandchild"):
        assert not alive(int(pid_file.read_text())), "a replica's child outlived it"


@pytest.mark.parametrize("flag", ["--grandchild", "--grandchild-session"])
def test_children_of_a_replica_are_stopped_with_it(tmp_path, fake, flag):
    """Also children in a session of their own, as torchrun starts its workers."""
    status, _, _, _ = supervise(tmp_path, fake, [1, 1], [flag, "--chief-needs=workerpool1-0:1"])
    assert status == 0
    pids = [int(path.read_text()) for path in fake.glob("*.grandchild")]
    assert len(pids) == 2 and not any(alive(pid) for pid in pids)


# --- the command line, end to end ------------------------------------------------------------


def new_job_id() -> str:
    """Unique per test run: several test runs may share this machine."""
    return job_spec.new_job_id()


def test_main_runs_the_job_with_each_replica_seeing_its_env(tmp_path, fake, capsys):
    out_dir, job_id = tmp_path / "out", new_job_id()
    argv = [
        "--replicas=2",
        f"--output-dir={out_dir}",
        "--module=fake_trainer",
        f"--job-id={job_id}",
        "--kill-after=checkpoint",
        "--no-restart-job-on-worker-restart",  # whatever vertex.yaml says: restart one replica
        "--grace=1",
        "--",
        "--state",
        str(fake),
        "--steps=3",
    ]
    assert tools_cli.main(["local-run", *argv]) == 0
    output = capsys.readouterr().out
    assert f"local_run | job {job_id}: workerpool0 x1, workerpool1 x1" in output
    assert f"local_run | model: {out_dir}/model/" in output
    assert runner_temp_dirs(job_id) == [] and job_processes(job_id) == []
    first = json.loads((fake / "workerpool0-0-1.json").read_text())
    again = json.loads((fake / "workerpool0-0-2.json").read_text())
    worker = json.loads((fake / "workerpool1-0-1.json").read_text())
    for key in ("CLUSTER_SPEC", "TF_CONFIG", "AIP_MODEL_DIR", "RANK", "MASTER_PORT"):
        assert first["env"][key] == again["env"][key], "a restarted replica keeps its env"
    assert first["env"]["TMPDIR"] != worker["env"]["TMPDIR"], "each replica has its own /tmp"
    assert first["env"]["TMPDIR"].startswith(tempfile.gettempdir())
    assert (first["env"]["RANK"], worker["env"]["RANK"]) == ("0", "1")
    if len(launcher.cpu_slices(2)) == 2 and launcher.cpu_slices(2)[0]:
        # Each replica has CPUs of its own, as on a VM of its own, also after a restart.
        assert first["cpus"] == again["cpus"] and not set(first["cpus"]) & set(worker["cpus"])
    assert first["argv"][-1] == "--steps=3"


def runner(tmp_path, state, job_id, *extra):
    """The runner as a user starts it, in its own process, reading the project's vertex.yaml."""
    command = [
        sys.executable,
        "-m",
        "vertex_trainer_tools",
        "local-run",
        "--replicas=2",
        f"--output-dir={tmp_path / 'out'}",
        "--module=fake_trainer",
        f"--job-id={job_id}",
        "--grace=1",
        *extra,
        "--",
        "--state",
        str(state),
        "--chief-seconds=3600",
    ]
    return subprocess.Popen(
        command, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def wait_for_replicas(process, state, count=2):
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list(state.glob("*.starts"))) < count:
        assert process.poll() is None, process.stdout.read()
        time.sleep(0.05)
    assert len(list(state.glob("*.starts"))) == count


def test_stopping_the_runner_stops_every_replica_and_removes_its_temp_dirs(tmp_path, fake):
    job_id = new_job_id()
    process = runner(tmp_path, fake, job_id)
    try:
        wait_for_replicas(process, fake)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM, output
    assert "interrupted by SIGTERM" in output
    assert job_processes(job_id) == [] and runner_temp_dirs(job_id) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_replicas_die_with_a_killed_runner(tmp_path, fake):
    job_id = new_job_id()
    process = runner(tmp_path, fake, job_id)
    try:
        wait_for_replicas(process, fake)
        process.kill()  # SIGKILL: the runner cannot clean up
        process.communicate(timeout=30)
        deadline = time.monotonic() + 60
        while job_processes(job_id) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert job_processes(job_id) == []
    finally:
        process.kill()
        for pid in job_processes(job_id):
            os.kill(pid, signal.SIGKILL)
        for folder in runner_temp_dirs(job_id):
            import shutil

            shutil.rmtree(folder, ignore_errors=True)


def test_the_drill_names_the_saved_checkpoints_in_step_order():
    saved = ["checkpoint-150", "checkpoint-20", "chief-0/checkpoint-3", "checkpoint-30"]
    assert sorted(saved, key=drills.by_task_and_step) == [
        "checkpoint-20",
        "checkpoint-30",
        "checkpoint-150",
        "chief-0/checkpoint-3",
    ]


COUNT_SIGTERMS = """
import os, signal, subprocess, sys, time
state, role = sys.argv[1], sys.argv[2]
def count(signum, frame):
    with open(os.path.join(state, role), "a") as handle:
        handle.write("TERM\\n")
signal.signal(signal.SIGTERM, count)
if role == "leader":
    for child, session in (("child", False), ("escaped", True)):
        command = [sys.executable, "-c", sys.argv[3], state, child]
        subprocess.Popen(command, start_new_session=session)
open(os.path.join(state, role + ".ready"), "w").close()
time.sleep(60)
"""


def test_a_sigterm_reaches_each_process_of_the_replica_once(tmp_path):
    """torchrun's agent raises on every SIGTERM: a second one lands in its cleanup (exit 1)."""
    env = {**os.environ, "CLOUD_ML_JOB_ID": new_job_id(), "CLUSTER_SPEC": "{}"}
    command = [sys.executable, "-c", COUNT_SIGTERMS, str(tmp_path), "leader", COUNT_SIGTERMS]
    process = subprocess.Popen(command, env=env, start_new_session=True)
    handle = launcher.ProcessHandle(process, env)
    try:
        roles = ("leader", "child", "escaped")
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"{r}.ready").exists() for r in roles):
            assert time.monotonic() < deadline, "the replica's processes did not start"
            time.sleep(0.05)
        handle.signal(signal.SIGTERM)
        time.sleep(1.0)
        counts = {r: (tmp_path / r).read_text().split() for r in roles if (tmp_path / r).exists()}
        assert counts == {r: ["TERM"] for r in roles}
    finally:
        handle.signal(signal.SIGKILL)
        process.wait()


def test_a_replica_that_exits_after_the_drill_fired_says_how_long_after(tmp_path):
    """A worker that must notice its chief is gone: its exit line gives the seconds since."""
    now = [0.0]
    sent = []

    class Handle:
        def signal(self, signum):
            sent.append(signum)

    class Replica:
        name, handle, drill_killed = "workerpool0-0", Handle(), False

    kill = drills.Drill(
        "workerpool0-0", after_seconds=1, say=lambda line: None, clock=lambda: now[0]
    )
    kill.start()
    assert kill.since_fired() == ""
    now[0] = 1.5
    kill.poll([Replica()], reap=lambda replica: None)
    assert sent == [signal.SIGKILL] and kill.since_fired() == " (0.0s after the kill drill)"
    now[0] = 9.25
    assert kill.since_fired() == " (7.8s after the kill drill)"
