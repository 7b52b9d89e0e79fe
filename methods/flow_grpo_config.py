"""Config of method=flow_grpo: Flow-GRPO's SD3.5-M values (yifan123/flow_grpo @ac4c86e)."""

from __future__ import annotations

from dataclasses import dataclass

from methods.grpo_config import Advantage, Decode, GRPOConfig, NoiseKernel
from methods.schedule_config import Schedule


@dataclass
class FlowGRPOConfig(GRPOConfig):
    _target_: str = "methods.flow_grpo.FlowGRPO"
    name: str = "flow_grpo"
    group_size: int = 24
    prompts_per_step: int = 48
    sampling_steps: int = 10
    update_batch: int = 18  # train.batch_size 9 samples x 2 CFG rows (SD3.5-M)
    shuffle_samples: bool = True
    schedule: Schedule = Schedule.scheduler  # the family's FlowMatchEulerDiscreteScheduler sigmas
    noise_kernel: NoiseKernel = NoiseKernel.flow
    eta: float = 0.7  # noise level a (0.9 Flux, 0.8 the Fast / CPS configs, 1.2 Qwen-Image)
    quantize_timestep: bool = False
    init_same_noise: bool = False
    decode: Decode = Decode.final
    advantage: Advantage = Advantage.prompt
    global_std: bool = True  # prompt mode's std over all the step's rewards: upstream's config/base.py sets
    # `sample.global_std = True` (@54809b5) and no SD3.5 config of config/grpo.py, Fast included, turns it off
    kl_beta: float = 0.04  # the GenEval / OCR value; 0.01 PickScore, 0 for Flux
    timestep_fraction: float = 0.99  # trains steps 0 .. floor(0.99 N) - 1 in order (the last step is excluded)


SCHEMAS = {"method": {"flow_grpo": FlowGRPOConfig}}
