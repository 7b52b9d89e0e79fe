"""Config of method=dance_grpo: the GRPO defaults are DanceGRPO's."""

from __future__ import annotations

from dataclasses import dataclass

from methods.grpo_config import GRPOConfig


@dataclass
class DanceGRPOConfig(GRPOConfig):
    _target_: str = "methods.dance_grpo.DanceGRPO"
    name: str = "dance_grpo"


SCHEMAS = {"method": {"dance_grpo": DanceGRPOConfig}}
