"""Where a run's processes come from and how they find each other: the ``cluster=`` configs, the device mesh FSDP2
shards over (``mesh``), which rank fills a node's caches first (``node_cache``), device checks (``device_check``), the
checks of the environment variables the launcher reads (``env_check``), SLURM sweeps (``slurm_launcher`` submits them and
holds the one-source-of-truth check of ``hydra.launcher.*`` against ``cluster.*``), their jobs' record, preflight and
status (``slurm_jobs``, ``slurm_preflight``, ``sweep_status``), local sweeps (``local_sweep`` runs the points,
``local_point`` is one point's process, ``local_jobs`` their record, ``local_status`` its reading), a point's progress
and ETA (``point_progress``), the check of every sweep point before anything is queued (``sweep_check``), the
sweep's start and end lines (``sweep_banner``) and the failing rank's log tails (``job_logs``).

It may import models (the model configs' device keys) and rewardflow; of the launcher, only the top-level
``launcher.validate`` and ``launcher.run_dir_check``, which the sweep check runs on every point, and
``launcher.checkpoint`` (the run identity of each point's run dir), ``launcher.plan`` (a SLURM job's memory and
signal delay, ``cluster_defaults``) and ``launcher.tracking`` (the objective a tuning sweeper reads, checked by
``sweep_check``) (docs/development.md#the-launchers-rooms).
"""
