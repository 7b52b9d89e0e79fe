"""``hydra/launcher=rewardflow_local`` (conf/cluster/local.yaml selects it): launcher/cluster/local_sweep.py.

Hydra instantiates a launcher only if its class is registered under a ``hydra_plugins.`` module name (its plugin
scan, or ``Plugins.register``: launcher/cluster/sweep_banner.py registers this class, because an editable install's
namespace package is invisible to the scan), so the class is declared here.
"""

from launcher.cluster.local_sweep import LocalSweepLauncher as _LocalSweepLauncher


class LocalSweepLauncher(_LocalSweepLauncher):
    pass
