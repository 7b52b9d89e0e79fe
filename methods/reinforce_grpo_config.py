"""Config of method=reinforce_grpo: Flow-GRPO's values (methods/flow_grpo_config.py); ``clip_range`` is unused."""

from __future__ import annotations

from dataclasses import dataclass

from methods.flow_grpo_config import FlowGRPOConfig


@dataclass
class ReinforceGRPOConfig(FlowGRPOConfig):
    _target_: str = "methods.reinforce_grpo.ReinforceGRPO"
    name: str = "reinforce_grpo"


SCHEMAS = {"method": {"reinforce_grpo": ReinforceGRPOConfig}}
