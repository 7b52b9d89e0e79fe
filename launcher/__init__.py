"""rewardflow's launcher: the Hydra entry point, config schemas, validation, the shared trainer loop and logging."""
