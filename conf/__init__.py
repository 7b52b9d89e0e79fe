"""rewardflow's Hydra config tree. An installed rewardflow ships this folder as the package ``launcher.conf``
(see setup.py), which the CLI loads through ``pkg://launcher.conf``; the file makes the folder that package."""
