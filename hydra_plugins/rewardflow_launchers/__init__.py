"""rewardflow's Hydra launchers: the classes Hydra instantiates, declared in its ``hydra_plugins`` namespace; their
code lives in ``launcher/`` (launcher/cluster/local_sweep.py, launcher/cluster/slurm_launcher.py)."""
