"""The newer worker-pool fields of a CustomJob: GPU partitions (MIG), NFS and Managed Lustre
mounts, and the TPUs that custom training does not offer.

- ``gpu_partition_size`` (``MachineSpec.gpuPartitionSize``): the pool's GPU split into MIG
  instances of that size; the size must be one the GPU has (NVIDIA's MIG profiles) and
  ``accelerator_count`` must then be 1 (the API reference: "If set, the accelerator_count
  should be set to 1").
- ``nfs_mounts`` / ``lustre_mounts`` (``WorkerPoolSpec.nfsMounts``, ``.lustreMounts``): mounted
  in every replica of the pool under ``/mnt/nfs/<mount_point>`` and
  ``/mnt/lustre/<mount_point>``. Both shares live in a VPC: the job needs ``job.network``.
- TPU v6e (Trillium, ``ct6e-*``) and TPU7x (Ironwood, ``tpu7x-*``) run on GKE and Cloud TPU
  VMs, not in custom training jobs: refused in one line that says so.
"""

from __future__ import annotations

import re

from vertex_trainer_tools.schema import Model, example

# MIG profiles per GPU (NVIDIA's MIG user guide), by Vertex's accelerator name.
MIG_SIZES = {
    "NVIDIA_TESLA_A100": ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "NVIDIA_A100_80GB": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "NVIDIA_H100_80GB": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "NVIDIA_H100_MEGA_80GB": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "NVIDIA_H200_141GB": ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
}
MOUNT_POINT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
UNOFFERED_TPU_MACHINES = re.compile(r"^(ct6e|tpu7x?)-")
UNOFFERED_TPU_ACCELERATORS = re.compile(r"^TPU_V(6E|7X?)\b")
UNOFFERED_TPU = (
    "TPU v6e (Trillium) and TPU7x (Ironwood) are not offered by Vertex AI custom training: "
    "they run on GKE or Cloud TPU VMs (custom training's TPUs: cloud-tpu for v2/v3, "
    "ct5lp-hightpu-* for v5e)"
)


class NfsMount(Model):
    server: str = example("10.0.0.2", "")  # the NFS server's address in the job's network
    path: str = example("/exports/data", "")  # exported by the server: server:path
    mount_point: str = example("data", "")  # mounted at /mnt/nfs/<mount_point>

    def problems(self):
        if not self.server:
            yield "server", "the NFS server's IP address or host name (e.g. 10.0.0.2)"
        if not self.path.startswith("/"):
            yield "path", "the exported path, starting with / (e.g. /exports/data)"
        if not MOUNT_POINT_RE.match(self.mount_point):
            yield "mount_point", "a folder name, mounted at /mnt/nfs/<mount_point> (e.g. data)"


class LustreMount(Model):
    instance_ip: str = example("10.0.0.3", "")  # the Managed Lustre instance's address
    volume_handle: str = example("my-project/us-central1-a/my-lustre", "")
    filesystem: str = example("lustrefs", "")  # the Lustre file system's name
    mount_point: str = example("lustre", "")  # mounted at /mnt/lustre/<mount_point>

    def problems(self):
        for name in ("instance_ip", "volume_handle", "filesystem"):
            if not getattr(self, name):
                yield name, f"required for a Managed Lustre mount (e.g. {_example(name)})"
        if not MOUNT_POINT_RE.match(self.mount_point):
            yield "mount_point", "a folder name, mounted at /mnt/lustre/<mount_point> (e.g. data)"


def _example(name: str) -> str:
    return LustreMount.model_fields[name].examples[0]


def partition_problem(size: str, accelerator: str, count: int) -> tuple[str, str] | None:
    """``(field, why)`` when a GPU partition size does not fit the pool's GPUs."""
    if not size:
        return None
    sizes = MIG_SIZES.get(accelerator)
    if sizes is None:
        gpus = ", ".join(MIG_SIZES)
        return "gpu_partition_size", f"{accelerator} has no MIG partitions (GPUs with them: {gpus})"
    if size not in sizes:
        return (
            "gpu_partition_size",
            f"{size!r} is not a MIG size of {accelerator}: {', '.join(sizes)}",
        )
    if count != 1:
        return "accelerator_count", f"a partitioned GPU pool has accelerator_count 1, not {count}"
    return None


def mount_problems(nfs, lustre, network: str) -> list[tuple[str, str]]:
    """``(field, why)`` for a pool's mounts: mount points unique, and a network to reach them."""
    problems = []
    for field, mounts in (("nfs_mounts", nfs), ("lustre_mounts", lustre)):
        points = [mount.mount_point for mount in mounts]
        for point in sorted({p for p in points if points.count(p) > 1}):
            problems.append((field, f"mount_point {point!r} is used twice in this pool"))
    if (nfs or lustre) and not network:
        field = "nfs_mounts" if nfs else "lustre_mounts"
        problems.append(
            (field, "NFS and Lustre shares are reached through the job's VPC: set job.network")
        )
    return problems


def unoffered_tpu(machine_type: str, accelerator: str) -> str | None:
    if UNOFFERED_TPU_MACHINES.match(machine_type) or UNOFFERED_TPU_ACCELERATORS.match(accelerator):
        return UNOFFERED_TPU
    return None


def machine_fields(pool) -> dict:
    """The partition size for ``MachineSpec`` (snake_case, as the SDK takes it)."""
    return {"gpu_partition_size": pool.gpu_partition_size} if pool.gpu_partition_size else {}


def mount_fields(pool) -> dict:
    """The pool's mounts for ``WorkerPoolSpec`` (snake_case)."""
    fields = {}
    if pool.nfs_mounts:
        fields["nfs_mounts"] = [mount.model_dump() for mount in pool.nfs_mounts]
    if pool.lustre_mounts:
        fields["lustre_mounts"] = [mount.model_dump() for mount in pool.lustre_mounts]
    return fields
