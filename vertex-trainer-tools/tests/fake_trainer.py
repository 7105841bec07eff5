"""A stand-in for ``trainer.task`` in the tests of the emulator itself (not of a framework):
run as ``python -m fake_trainer`` by the replicas, it behaves as the test's flags say and records
what it saw (its argv, env and CPUs, each start) in ``--state``. ``conftest.install_fake_trainer``
makes it importable.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from vertex_trainer_runtime import checkpoints, ledger, preemption, runtime  # as trainers do

parser = argparse.ArgumentParser()
parser.add_argument("--state", required=True)
parser.add_argument("--chief-seconds", type=float, default=0.3)
parser.add_argument("--worker-seconds", type=float, default=3600)
parser.add_argument("--fail", action="append", default=[])  # NAME:ATTEMPTS:EXIT_CODE
parser.add_argument("--chief-needs", default="")  # NAME:ATTEMPT that must have started
parser.add_argument("--worker-needs", default="")  # the same, before a worker does anything
parser.add_argument("--chief-succeeds-on-attempt", type=int, default=1)
parser.add_argument("--steps", type=int, default=0)  # chief saves a checkpoint per step
parser.add_argument("--keep", type=int, default=0)  # prune all but the newest N, as trainers do
parser.add_argument("--ignore-sigterm", action="store_true")
parser.add_argument("--save-on-sigterm", action="store_true")  # checkpoint at the next step, 143
parser.add_argument("--grandchild", action="store_true")
parser.add_argument("--grandchild-session", action="store_true")  # as torchrun starts workers
args, _ = parser.parse_known_args()


def started(who):
    path = os.path.join(args.state, who + ".starts")
    return len(open(path).read().split()) if os.path.exists(path) else 0


def wait_for(rule):
    who, wanted = rule.split(":")
    # Generous: on a loaded machine a replica's Python can take many seconds to start, and
    # giving up early would let the chief go on without it (a failure that is no bug).
    deadline = time.monotonic() + 600
    while started(who) < int(wanted) and time.monotonic() < deadline:
        time.sleep(0.05)


spec = json.loads(os.environ["CLUSTER_SPEC"])
name = f"{spec['task']['type']}-{spec['task']['index']}"
attempt = started(name) + 1
if args.ignore_sigterm:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
notices = []
if args.save_on_sigterm:
    signal.signal(signal.SIGTERM, lambda *_: notices.append(1))
if args.grandchild or args.grandchild_session:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(3600)"],
        start_new_session=args.grandchild_session,
    )
    with open(os.path.join(args.state, f"{name}-{attempt}.grandchild"), "w") as handle:
        handle.write(str(child.pid))
with open(os.path.join(args.state, f"{name}-{attempt}.json"), "w") as handle:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ), "cpus": cpus}, handle)
# Recorded last: once a start is counted, everything above has happened.
with open(os.path.join(args.state, name + ".starts"), "a") as handle:
    handle.write(f"{os.getpid()}\n")
print(f"hello from {name} attempt {attempt}", flush=True)
if args.worker_needs and name != "workerpool0-0":
    wait_for(args.worker_needs)
for rule in args.fail:
    who, times, code = rule.split(":")
    if who == name and attempt <= int(times):
        print(f"{name} fails on purpose", flush=True)
        sys.exit(int(code))
if name != "workerpool0-0":
    time.sleep(args.worker_seconds)
    sys.exit(0)
if args.chief_needs:
    wait_for(args.chief_needs)
if attempt < args.chief_succeeds_on_attempt:
    time.sleep(3600)
if args.steps:
    root = os.environ["AIP_CHECKPOINT_DIR"]
    os.makedirs(root, exist_ok=True)
    done = [c.step for c in checkpoints.list_checkpoints(root) if os.path.exists(c.marker)]
    start = max(done, default=0)
    print(f"resuming from step {start}", flush=True)
    ledger.open_for(root, runtime.cluster_from_env()).record("step_start_time", step_count=start)
    for step in range(start + 1, args.steps + 1):
        time.sleep(0.3)
        ledger.current().steps(step, step, 0.3)
        # Read before the save: a notice sent once this step's checkpoint is complete (as the
        # drill does) is acted on at the next step, never by re-announcing this one.
        noticed = bool(notices)
        folder = checkpoints.path_for(root, step)
        os.makedirs(folder, exist_ok=True)
        checkpoints.mark_complete(folder, step)
        ledger.record("pause", kind="checkpoint", seconds=0.0)  # written at once
        print(f"step {step}", flush=True)
        if noticed:
            print(f"preemption notice: saved checkpoint-{step}", flush=True)
            ledger.close(preemption.EXIT_CODE)
            sys.exit(preemption.EXIT_CODE)
        if args.keep:
            for old in range(1, step - args.keep + 1):
                shutil.rmtree(os.path.join(root, f"checkpoint-{old}"), ignore_errors=True)
time.sleep(args.chief_seconds)
ledger.close(0)
print(f"{name} done", flush=True)
