"""The distribution strategy of a Keras job, from Vertex's cluster; how its tasks agree.

Part of vertex-trainer-runtime (``vertex_trainer_runtime.keras``). MultiWorkerMirroredStrategy
for several training replicas (a Reduction Server's ``ps`` taken out of TF_CONFIG),
MirroredStrategy for several GPUs; ``Consensus`` lets every task decide the same thing, and
``chief_first`` runs work on shared storage on the chief before the others. The job ledger
counts the strategy's start (it returns once every task has joined its coordination service)
and the wait for the chief's preparation as waiting for peers.
"""

from __future__ import annotations

import json
import logging
import os

import tensorflow as tf

from vertex_trainer_runtime import cli, ledger, runtime

logger = logging.getLogger(__name__)

# What a task waits for when MultiWorkerMirroredStrategy starts: every other task, up to the
# point where it creates its strategy (a replica that starts late is waited for here).
JOINING = "the other tasks joining MultiWorkerMirroredStrategy"


def make_strategy(cluster: runtime.Cluster) -> tf.distribute.Strategy:
    """Pick the strategy; MultiWorkerMirroredStrategy must exist before any other TF op runs."""
    if cluster.pool not in runtime.TRAINING_POOLS:
        raise cli.InputError(
            f"this replica is in {cluster.pool}, which MultiWorkerMirroredStrategy does not "
            "use: pool 2 is for job.reduction_server (Google's image), pool 3 is not used"
        )
    if cluster.is_distributed:
        used = {*runtime.TRAINING_POOLS, runtime.REDUCTION_SERVER_POOL}
        extra = sorted(set(cluster.pools) - used)
        if extra:
            raise cli.InputError(
                f"worker pools {', '.join(extra)} (evaluators) are not used by "
                "MultiWorkerMirroredStrategy; remove them from vertex.yaml"
            )
        if cluster.tf_config is None:
            raise cli.InputError(
                f"{cluster.num_nodes} training replicas but no TF_CONFIG: "
                "MultiWorkerMirroredStrategy needs it (Vertex sets it on multi-replica jobs)"
            )
        if not cluster.reducers:
            with ledger.waiting_for_peers(JOINING):
                return tf.distribute.MultiWorkerMirroredStrategy()
        # Reduction Server: Vertex lists it as "ps", which TensorFlow must not see (it would
        # wait on it as its coordination leader), and only NCCL's all-reduce reaches it (Google's
        # plugin), while TensorFlow's AUTO picks its own ring. No GPUs, no NCCL: the reducers idle.
        os.environ["TF_CONFIG"] = json.dumps(runtime.training_tf_config(cluster.tf_config))
        gpus = bool(tf.config.list_physical_devices("GPU"))
        how = "NCCL all-reduce" if gpus else "no GPUs, so no NCCL: they idle"
        logger.info("Reduction Server: %d replica(s), %s", len(cluster.reducers), how)
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.NCCL
        )
        with ledger.waiting_for_peers(JOINING):
            return tf.distribute.MultiWorkerMirroredStrategy(
                communication_options=options if gpus else None
            )
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def strategy_name(strategy: tf.distribute.Strategy) -> str:
    # tf.distribute.MultiWorkerMirroredStrategy's class is named CollectiveAllReduceStrategy.
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "MultiWorkerMirroredStrategy"
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        return "MirroredStrategy"
    return "Default strategy"


class Consensus:
    """Lets all tasks of a multi-worker job decide the same thing (no-op on one task)."""

    def __init__(self, strategy: tf.distribute.Strategy, distributed: bool):
        self.strategy = strategy
        self.distributed = distributed
        self._gather = None

    def gather(self, value: int) -> list[int]:
        """``value`` from every replica of every task (just ``[value]`` when not distributed)."""
        if not self.distributed:
            return [value]
        if self._gather is None:
            # Traced once: run eagerly, every call would build (and trace) the collective anew,
            # a cost per step now that the notice is agreed on every slow step.
            @tf.function
            def gather(values):
                per_replica = self.strategy.run(lambda: tf.identity(values))
                return self.strategy.gather(per_replica, axis=0)

            self._gather = gather
        gathered = self._gather(tf.constant([value], tf.int64))
        return [int(v) for v in gathered.numpy()]

    def any(self, flag: bool) -> bool:
        return any(self.gather(int(flag)))

    def minimum(self, value: int) -> int:
        return min(self.gather(value))


def chief_first(consensus: Consensus, is_chief: bool):
    """``call(action)``: the chief runs ``action`` while the other tasks wait, then they do;
    returns its result.

    For work on shared storage, such as preparing a TFDS dataset: the others then find it done.
    An input error on the chief stops every task (without waiting forever for it).
    """

    def call(action):
        result, failure = None, None
        if is_chief:
            try:
                result = action()
            except cli.InputError as error:
                failure = error
        with ledger.waiting_for_peers("the chief preparing the input data"):
            chief_failed = consensus.any(failure is not None)  # the other tasks wait here
        if failure is not None:
            raise failure
        if chief_failed:
            raise cli.InputError("the chief could not prepare the input data (see its log)")
        return result if is_chief else action()

    return call
