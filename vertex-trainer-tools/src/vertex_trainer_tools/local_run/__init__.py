"""Run the Vertex AI job from ``vertex.yaml`` on this machine, replica by replica.

``gcloud ai custom-jobs local-run`` needs Docker and gives the container none of the cluster
environment Vertex gives a real job. This runner starts one ``python -m trainer.task`` process
per replica of the configured worker pools, on loopback ports, each with the environment Vertex
sets on that replica (``contract.replica_environment``: ``AIP_*`` output dirs,
``CLOUD_ML_PROJECT_ID``, ``CLOUD_ML_JOB_ID``, ``CLUSTER_SPEC``, ``TF_CONFIG`` and
``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK`` on multi-replica jobs, ``--name=value``
args of a hyperparameter-tuning trial), and supervises them the way Vertex does: the job
succeeds when workerpool0 exits 0, a failed replica is rerun from the start up to 5 times, and
``--kill-after`` preempts a replica once to prove that training resumes from its checkpoints.
Like a submitted job, each run starts in a fresh job folder under ``outputs/local/``.

Modules: ``job`` (the job spec), ``folders`` (job folders, ``latest``), ``launcher`` (how a
replica starts: local processes, and the launcher interface), ``images`` (``--image``: each
replica a container of the built image, on a Docker network of the job), ``supervisor``
(start/stop/restart, the kill drill), ``preflight`` (can this Python run the trainer?),
``cli`` (the command line).

Usage (from the project root; ``make train-local`` wraps it)::

    vertex-tools local-run --replicas=2 -- --train-data=synthetic --eval-data=synthetic
    vertex-tools local-run --resume=latest
    vertex-tools local-run --hpt-trial=3 --print-env
    vertex-tools local-run --image --replicas=2   # containers of the image make build tagged
"""
