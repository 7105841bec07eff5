"""XGBoost's own collective across Vertex replicas: a tracker on the chief, every replica a worker.
The runtime's (``vertex_trainer_runtime.xgboost``), driven by ``CLUSTER_SPEC``: no user edits it.

Every replica joins with its node rank as task id, so XGBoost's ranks are Vertex's; XGBoost then
all-reduces histograms, sketches and metrics itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from vertex_trainer_runtime import ledger, preemption, runtime
from vertex_trainer_runtime.cli import InputError

logger = logging.getLogger(__name__)

# Replicas start when their VM is ready, so the chief waits this long for all of them ...
BOOTSTRAP_TIMEOUT_S = 30 * 60
# ... and a worker retries the tracker with a 2 s, 4 s, 6 s ... back-off: 24 tries ~ 10 min.
TRACKER_RETRIES = 24
# How long a restarted chief waits for its tracker port to be released.
PORT_WAIT_S = 3 * 60
# A collective call fails after this long without its peers, so a worker whose chief is gone (VM
# stopped, no TCP reset) exits within Compute Engine's 30 s grace, not XGBoost's minutes. No
# replica may work alone longer between two collective calls (data are read before the group).
COLLECTIVE_TIMEOUT_S = 20
# Trackers of a group left on a preemption notice: kept until the process ends (exit_now).
_LEFT_ON_NOTICE = []


@dataclass(frozen=True)
class Group:
    """This process in the training group (``world == 1``: not distributed)."""

    rank: int = 0
    world: int = 1

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def broadcast(self, value: Any, root: int = 0) -> Any:
        """``root``'s ``value`` on every replica (any picklable object, ``None`` included)."""
        if not self.distributed:
            return value
        from xgboost import collective

        return collective.broadcast({"value": value}, root)["value"]

    def allgather(self, value: Any) -> list:
        """Every replica's ``value``, in rank order (small objects: schemas, counts)."""
        return [self.broadcast(value, root) for root in range(self.world)]


@contextmanager
def group(cluster: runtime.Cluster) -> Iterator[Group]:
    """Join XGBoost's collective for the duration of training when there are several replicas.

    A replica that fails inside the group leaves without the shutdown handshake: it exits
    quickly and non-zero, Vertex restarts it, and the others fail on their next collective call
    instead of waiting for it; the rerun resumes from the chief's checkpoint.
    """
    if not cluster.is_distributed:
        yield Group()
        return
    import xgboost
    from xgboost import collective

    if int(xgboost.__version__.split(".")[0]) < 3:
        # 2.x's tracker ignores the port it is given: replicas could never find it.
        raise InputError(f"multi-replica training needs xgboost>=3.0, not {xgboost.__version__}")
    host, port = cluster.chief_address
    rank, world = cluster.node_rank, cluster.num_nodes
    tracker = start_tracker(host, port, world) if rank == 0 else None
    # Joining waits for every replica: the job ledger counts it as waiting for peers.
    with ledger.waiting_for_peers("the XGBoost collective"):
        _join(host, port, rank)
    joined = Group(collective.get_rank(), collective.get_world_size())
    if (joined.rank, joined.world) != (rank, world):
        raise RuntimeError(
            f"XGBoost collective gave rank {joined.rank} of {joined.world}, "
            f"CLUSTER_SPEC says {rank} of {world}"
        )
    logger.info("Joined the XGBoost collective as rank %d of %d", rank, world)
    try:
        yield joined  # an exception here propagates without the handshake below
    except preemption.Preempted:
        # Every replica stopped after the same round and exits now; freeing the tracker here
        # would only log the closed connections of its peers.
        _LEFT_ON_NOTICE.append(tracker)
        raise
    collective.finalize()
    if tracker is not None:
        tracker.wait_for()
        tracker.free()


def _join(host: str, port: int, rank: int) -> None:
    from xgboost import collective

    # Zero-padded task ids sort like the node ranks, so the chief is rank 0.
    collective.init(
        dmlc_communicator="rabit",
        dmlc_tracker_uri=host,
        dmlc_tracker_port=port,
        dmlc_task_id=f"{rank:06d}",
        dmlc_retry=TRACKER_RETRIES,
        dmlc_timeout=COLLECTIVE_TIMEOUT_S,
    )


def start_tracker(host: str, port: int, world: int):
    """XGBoost's tracker on the chief's ``CLUSTER_SPEC`` address.

    A restarted chief may find its port still held by the closing connections of its previous
    run (TCP TIME_WAIT, about a minute), so binding is retried for a while.
    """
    from xgboost.core import XGBoostError
    from xgboost.tracker import RabitTracker

    deadline = time.monotonic() + PORT_WAIT_S
    while True:
        try:
            tracker = RabitTracker(
                n_workers=world,
                host_ip=host,
                port=port,
                sortby="task",
                timeout=BOOTSTRAP_TIMEOUT_S,
            )
            break
        except XGBoostError as error:
            if "already in use" not in str(error) or time.monotonic() > deadline:
                raise
            logger.warning("Tracker port %d is still in use; retrying", port)
            time.sleep(5)
    tracker.start()
    logger.info("XGBoost tracker for %d replicas listening on %s:%d", world, host, port)
    return tracker
