"""One DDP job across Vertex replicas: a torchrun agent per replica, a process per GPU.

Vertex starts the container's entry point once per replica with ``CLUSTER_SPEC``. The replicas
of worker pools 0 and 1 are the nodes of the job (pool 2 is the Reduction Server, pool 3
evaluators); ``trainer.runtime`` turns the spec into the node count, this node's rank and the
chief's address. This module hands those to ``torch.distributed.run`` (what ``torchrun`` runs),
which starts ``python -m trainer.task`` once per local GPU (once on a CPU machine) with
``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` set per process. Vertex's own ``WORLD_SIZE``/``RANK``
count nodes, so they are never used directly.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

import torch

from trainer import cli, preemption, runtime

logger = logging.getLogger(__name__)

# Replicas start as their VMs become ready; the chief waits this long for the others.
RENDEZVOUS_TIMEOUT_S = 1800


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
    """End this torchrun worker now, skipping Python's teardown of the process group.

    Freeing a gloo process group from Python can deadlock (pytorch/pytorch#56297): when the
    DDP reducer drops the last reference, ``~ProcessGroupGloo`` joins its worker thread while
    holding the GIL, and that thread needs the GIL to free the tensors of its last collective.
    The worker then never exits and its torchrun agent never reaches the exit barrier. Called
    after the final barrier, when every rank has written all it writes, so nothing is lost.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_worker(train: Callable[[], int]) -> int:
    """Run ``train`` in a torchrun worker; if it raises, say why and end the process at once.

    After a peer is lost (a preempted VM) the collective raises here; the teardown that would
    follow can hang like the one ``end_worker`` avoids, and then this node's agent never
    reports the failure, so Vertex never restarts the replica.
    """
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
    """The command line of this process (``argv``: default ``sys.argv[1:]``) plus ``extra``.

    The workers get the flags exactly as given, not rebuilt from the parsed values: that loses
    what cannot be spelled back, e.g. ``--no-group-by-length`` would turn the default on again.
    ``extra`` comes last, so it wins over the same flag given earlier.
    """
    return [*(sys.argv[1:] if argv is None else argv), *extra]


def launch(job: Plan, argv: list[str]) -> int:
    """Run ``python -m trainer.task argv`` under torchrun on this node; the worst exit code."""
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
    try:
        run(parse_args([*options, "--module", "trainer.task", *argv]))
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
        # torchrun leaves its handler in place, which raises on a SIGTERM in the cleanup that
        # follows (a traceback and exit 1). The workers are gone: a notice now changes nothing.
        preemption.Notice().install()
    return 0
