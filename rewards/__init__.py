"""Rewards: modules that score decoded images (B, 3, H, W) in [0, 1] against their prompts."""
