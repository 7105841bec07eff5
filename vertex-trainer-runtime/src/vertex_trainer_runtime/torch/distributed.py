"""One DDP job across Vertex replicas: a torchrun agent per replica, a process per GPU.

``vertex_trainer_runtime.runtime`` turns ``CLUSTER_SPEC`` into the node count, this node's
rank and the chief's address (pools 0 and 1 train); ``torch.distributed.run`` starts the
trainer's module (``python -m trainer.task``) once per local GPU with ``RANK``/``LOCAL_RANK``/
``WORLD_SIZE`` set.
Vertex's own ``WORLD_SIZE``/``RANK`` count nodes, so they are never used directly.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

import torch

from vertex_trainer_runtime import cli, ledger, preemption, runtime

logger = logging.getLogger(__name__)

# Replicas start as their VMs become ready; the chief waits this long for the others.
RENDEZVOUS_TIMEOUT_S = 1800
# A worker asks torchrun's store on the chief this often whether the chief is still there, and
# takes no answer within the timeout for "gone": it then exits, well inside a preemption's 30 s
# grace period, instead of waiting up to RENDEZVOUS_TIMEOUT_S (or the process group's timeout)
# in a collective or on the store for a chief that will never answer.
CHIEF_CHECK_SECONDS = 2.0
CHIEF_TIMEOUT_SECONDS = 8.0


@dataclass(frozen=True)
class Plan:
    nnodes: int
    node_rank: int
    nproc_per_node: int
    master: tuple[str, int] | None

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node


def is_worker(environ: Mapping[str, str] | None = None) -> bool:
    """True in a process started by torchrun (ours or the user's): it trains, never launches."""
    env = os.environ if environ is None else environ
    return "LOCAL_RANK" in env


def plan(cluster: runtime.Cluster, nproc_per_node: int = 0) -> Plan:
    """This replica's part of the job; ``nproc_per_node`` 0 means one per GPU, 1 without."""
    if cluster.pool not in ("workerpool0", "workerpool1"):
        raise cli.InputError(
            f"this replica is in {cluster.pool}, which does not train: put training replicas in "
            "worker pools 0 and 1 (pool 2 is for the Reduction Server)"
        )
    processes = nproc_per_node or max(1, torch.cuda.device_count())
    return Plan(cluster.num_nodes, cluster.node_rank, processes, cluster.chief_address)


def end_worker(code: int) -> NoReturn:
    """End this torchrun worker now, after its last barrier, skipping Python's teardown of the
    process group: freeing a gloo group can deadlock (pytorch/pytorch#56297) and then the agent
    never reaches its exit barrier."""
    ledger.close(code)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def watch_chief(environ: Mapping[str, str] | None = None) -> threading.Thread | None:
    """End this torchrun worker once torchrun's store on the chief stops answering, instead of
    waiting many minutes for a VM that is gone; None without an agent store to watch."""
    env = os.environ if environ is None else environ
    host, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if not host or not port or env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true":
        return None
    thread = threading.Thread(
        target=_watch_chief, args=(host, int(port)), name="watch-chief", daemon=True
    )
    thread.start()
    return thread


def _watch_chief(host: str, port: int) -> None:
    """Exit once the store has not answered for CHIEF_CHECK_SECONDS + CHIEF_TIMEOUT_SECONDS (asked
    from a thread of its own: a vanished VM can leave a question unanswered for good)."""
    import torch.distributed as dist

    answered = [time.monotonic()]
    failed: list[str] = []

    def ask() -> None:
        try:
            timeout = datetime.timedelta(seconds=CHIEF_TIMEOUT_SECONDS)
            store = dist.TCPStore(
                host, port, is_master=False, timeout=timeout, wait_for_workers=False
            )
            while True:
                store.check(["watch-chief"])
                answered[0] = time.monotonic()
                time.sleep(CHIEF_CHECK_SECONDS)
        except Exception as error:  # noqa: BLE001 - any failure to reach the store means the same
            lines = str(error).splitlines()
            failed.append(lines[0] if lines else type(error).__name__)

    threading.Thread(target=ask, name="ask-chief", daemon=True).start()
    limit = CHIEF_CHECK_SECONDS + CHIEF_TIMEOUT_SECONDS
    while not failed and time.monotonic() - answered[0] <= limit:
        time.sleep(0.5)
    why = failed[0] if failed else f"no answer for {limit:g} s"
    logger.error(
        "torchrun's store on the chief (%s:%d) does not answer (%s): the chief is gone, "
        "exiting so that Vertex restarts this replica",
        host,
        port,
        why,
    )
    end_worker(1)


def run_worker(train: Callable[[], int]) -> int:
    """Run ``train`` in a torchrun worker; if it raises, say why and end the process at once (the
    teardown after a lost peer can hang, and Vertex would never restart the replica)."""
    watch_chief()
    try:
        return train()
    except preemption.Preempted as stop:
        logger.warning(stop.message())
        end_worker(preemption.EXIT_CODE)
    except cli.InputError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        end_worker(2)
    except Exception:  # noqa: BLE001 - whatever it is, the worker ends now with its trace
        traceback.print_exc()
        end_worker(1)


def worker_argv(extra: Sequence[str] = (), argv: Sequence[str] | None = None) -> list[str]:
    """This process's command line as given (``argv``: default ``sys.argv[1:]``), then ``extra``,
    which wins: rebuilt from parsed values, ``--no-group-by-length`` would be lost."""
    return [*(sys.argv[1:] if argv is None else argv), *extra]


def _children(pid: int | None = None) -> list[int]:
    """The processes whose parent is ``pid`` (this one), from /proc (none elsewhere)."""
    parent = str(os.getpid() if pid is None else pid)
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and fields[1] == parent:
            found.append(int(entry))
    return found


class _ForwardSigterm:
    """torchrun's signal handler, except that SIGTERM is forwarded to the workers and nothing more:
    they save and exit 143 (or finish, 0) and torchrun reports that, instead of ending 143 whatever
    they did. Forwarded, since Vertex's SIGTERM may reach only PID 1."""

    def __init__(self, original):
        self.original = original
        self.forwarded = 0

    def __call__(self, signum, frame):
        if signum != signal.SIGTERM:
            return self.original(signum, frame)
        self.forwarded += 1
        for pid in _children():
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
        return None


def launch(job: Plan, argv: list[str], module: str) -> int:
    """Run ``python -m MODULE argv`` under torchrun on this node; the worst exit code."""
    from torch.distributed.elastic.multiprocessing import api as torchrun_processes
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    options = [
        f"--nnodes={job.nnodes}",
        f"--nproc-per-node={job.nproc_per_node}",
        "--max-restarts=0",  # Vertex restarts the replica; resuming is the checkpoints' job
    ]
    if job.nnodes == 1:
        options.append("--standalone")
    else:
        if job.master is None:
            raise cli.InputError("CLUSTER_SPEC has no workerpool0 address to meet at")
        host, port = job.master
        options += [
            f"--node-rank={job.node_rank}",
            f"--master-addr={host}",
            f"--master-port={port}",
            "--rdzv-backend=static",
            f"--rdzv-conf=timeout={RENDEZVOUS_TIMEOUT_S}",
        ]
    logger.info(
        "Launching %d process(es) on node %d of %d: torchrun %s",
        job.nproc_per_node,
        job.node_rank,
        job.nnodes,
        " ".join(options),
    )
    # The node's local rank 0 records this replica's attempt in the job ledger from here on.
    os.environ.update(ledger.handover())
    rendezvous = _timed_rendezvous() if job.nnodes > 1 else contextlib.nullcontext()
    # torchrun installs this handler once its workers started; until then SIGTERM ends the
    # launcher at once (nothing is saved before training, and rendezvous may wait long).
    original = getattr(torchrun_processes, "_terminate_process_handler", None)
    forward = _ForwardSigterm(original) if original is not None else None
    if forward is not None:
        torchrun_processes._terminate_process_handler = forward
    try:
        with rendezvous:
            run(parse_args([*options, "--module", module, *argv]))
        if forward is not None and forward.forwarded:
            logger.info("SIGTERM came after the workers' last step: they finished, exiting 0")
    except ChildFailedError as error:
        codes = [failure.exitcode for failure in error.failures.values()]
        logger.error("Training processes failed with exit codes %s", codes)
        return next((code for code in codes if code and code > 0), 1)
    except SignalException as stop:
        # SIGTERM (a preemption): the agent forwarded it and waited for its workers, which
        # saved a checkpoint at an agreed step and exited. Non-zero: Vertex reruns the replica.
        logger.warning("torchrun stopped its workers on %s: exiting for a restart", stop.sigval)
        return preemption.EXIT_CODE
    finally:
        if forward is not None:
            torchrun_processes._terminate_process_handler = original
        # torchrun leaves its handler in place, which raises on a SIGTERM in the cleanup that
        # follows (a traceback and exit 1). The workers are gone: a notice now changes nothing.
        preemption.Notice().install()
    return 0


@contextlib.contextmanager
def _timed_rendezvous() -> Iterator[None]:
    """While the block runs, torchrun's agent hands the time its rendezvous took (the wait for
    the other replicas' agents, before the workers exist) to its workers' job ledger through
    their environment (``ledger.handover_wait``): waiting for peers, not start-up."""
    from torch.distributed.elastic.agent.server import api as agent

    original = getattr(agent.SimpleElasticAgent, "_rendezvous", None)
    if original is None:  # another torch: the wait stays in start-up
        yield
        return

    def rendezvous(self, worker_group):
        began = time.time()
        result = original(self, worker_group)
        os.environ.update(ledger.handover_wait(began, time.time()))  # workers inherit it
        return result

    agent.SimpleElasticAgent._rendezvous = rendezvous
    try:
        yield
    finally:
        agent.SimpleElasticAgent._rendezvous = original
