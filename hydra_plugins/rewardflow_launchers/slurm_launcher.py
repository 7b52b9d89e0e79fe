"""``hydra/launcher=rewardflow_slurm`` (conf/cluster/slurm.yaml selects it): launcher/cluster/slurm_launcher.py.

Declared here for the reason hydra_plugins/rewardflow_launchers/local_sweep_launcher.py gives (Hydra instantiates
launchers only from its ``hydra_plugins`` namespace; launcher/cluster/sweep_banner.py registers this class too).
"""

from launcher.cluster.slurm_launcher import SlurmSweepLauncher as _SlurmSweepLauncher


class SlurmSweepLauncher(_SlurmSweepLauncher):
    pass
