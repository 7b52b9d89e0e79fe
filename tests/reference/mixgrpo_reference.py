# ruff: noqa
"""The authors' MixGRPO code the equality tests run (tests/test_mix_grpo.py), copied verbatim (then ruff-formatted;
no token changed) from Tencent-Hunyuan/MixGRPO @ e5cdd6a427778d8c8b2e7a48ce16972141adbe7c:

- `GRPOTrainingStates`: fastvideo/utils/grpo_states.py (lines 1-160, the class only)
- `sd3_time_shift`, `flow_grpo_step`: fastvideo/utils/sampling_utils.py (lines 9-10, 157-210)
- `reference_group_advantages`, `reference_policy_loss`: the statements of `train_one_step` in
  fastvideo/train_grpo_flux.py (lines 459-479, the reward_aggr branch of the group advantages; lines 547-548
  and 567-584, the loss),
  wrapped in functions whose arguments name the variables those statements read.

MixGRPO is licensed under the License Terms of MixGRPO (License.txt of that repository, Copyright (C) 2025 Tencent);
these excerpts are kept here only to test this repository's port against them.
"""

import math
from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import torch
from diffusers.utils.torch_utils import randn_tensor


@dataclass
class GRPOTrainingStates:
    """Parameters for progressive grpo training strategy.

    This class manages the parameters and state for progressive training, where
    training is done in groups of timesteps.

    Attributes:
        iters_per_group (int): Number of iterations to train on each group of timesteps
        group_size (int): Number of timesteps in each group
        max_timesteps (int): Maximum number of timesteps to train on
        cur_timestep (int): Current timestep being trained on
        cur_iter_in_group (int): Current iteration within the current group
        sample_strategy (str): Strategy for sampling timesteps ("progressive", "random", "decay" or "exp_decay")
        seed (int, optional): Random seed for reproducibility. If None, no seed is set.
        max_iters_per_group (int): Maximum number of iterations per group for decay strategy
        min_iters_per_group (int): Minimum number of iterations per group for decay strategy
        roll_back (bool): Whether to roll back to the initial timestep when max_timesteps is reached
        prog_overlap (bool): Whether to overlap the progressive sampling
        prog_overlap_step (int): Step size for progressive overlap
        exp_decay_thre_timestep (int): Threshold timestep for exponential decay strategy
        exp_decay_k (float): Decay rate for exponential decay strategy
    """

    iters_per_group: int
    group_size: int
    max_timesteps: int
    cur_timestep: int = 0
    cur_iter_in_group: int = 0
    sample_strategy: str = "progressive"
    prog_overlap: bool = False
    prog_overlap_step: int = 1
    max_iters_per_group: int = None
    min_iters_per_group: int = None
    roll_back: bool = False
    exp_decay_thre_timestep: int = 13
    exp_decay_k: float = 0.1

    def set_params(self, params: dict):
        for key, value in params.items():
            setattr(self, key, value)

    def __post_init__(self):
        if self.sample_strategy == "decay":
            if self.max_iters_per_group is None:
                self.max_iters_per_group = self.iters_per_group
            if self.min_iters_per_group is None:
                self.min_iters_per_group = max(1, self.iters_per_group // 4)
        self.init_timestep = self.cur_timestep

    def get_dynamic_iters_per_group(self) -> int:
        """Calculate the dynamic number of iterations per group based on current timestep.

        Returns:
            int: Number of iterations for the current group.
        """
        if self.sample_strategy != "decay":
            return self.iters_per_group

        # Linear interpolation between max_iters_per_group and min_iters_per_group
        progress = self.cur_timestep / self.max_timesteps
        current_iters = int(self.max_iters_per_group * (1 - progress) + self.min_iters_per_group * progress)
        return max(self.min_iters_per_group, current_iters)

    def get_exp_decay_iters_per_group(self) -> int:
        """Calculate the number of iterations per group for exponential decay strategy.
           Formula: y(t) = iters_per_grounp * exp(-k * ReLU(t-threshold))
        Returns:
            int: Number of iterations for the current group.
        """
        if self.sample_strategy != "exp_decay":
            return self.iters_per_group

        # Exponential decay: double the group size each time
        relu_value = max(0, self.cur_timestep - self.exp_decay_thre_timestep)
        decay_value = self.iters_per_group * np.exp(-self.exp_decay_k * relu_value)

        # Ensure the decay value is at least 1
        return np.ceil(decay_value)

    def update_iteration(self, seed=None) -> None:
        """Update the current iteration counter and timestep if needed."""
        if self.sample_strategy == "progressive":
            self.cur_iter_in_group += 1
            if self.cur_iter_in_group >= self.iters_per_group:
                self.cur_iter_in_group = 0
                if self.prog_overlap:
                    self.cur_timestep += self.prog_overlap_step
                else:
                    self.cur_timestep += self.group_size
            if self.cur_timestep > self.max_timesteps:
                if self.roll_back:  # roll back to the start
                    self.roll_back_start()
                else:  # Clip
                    self.cur_timestep = self.max_timesteps
        elif self.sample_strategy == "random":
            rng = np.random.default_rng(seed)
            self.cur_timestep = rng.integers(0, self.max_timesteps - self.group_size + 1)
        elif self.sample_strategy == "decay":
            self.cur_iter_in_group += 1
            current_iters = self.get_dynamic_iters_per_group()
            if self.cur_iter_in_group >= current_iters:
                self.cur_iter_in_group = 0
                if self.prog_overlap:
                    self.cur_timestep += self.prog_overlap_step
                else:
                    self.cur_timestep += self.group_size
            if self.cur_timestep > self.max_timesteps:
                if self.roll_back:  # roll back to the start
                    self.roll_back_start()
                else:  # Clip
                    self.cur_timestep = self.max_timesteps
        elif self.sample_strategy == "exp_decay":
            self.cur_iter_in_group += 1
            current_iters = self.get_exp_decay_iters_per_group()
            if self.cur_iter_in_group >= current_iters:
                self.cur_iter_in_group = 0
                if self.prog_overlap:
                    self.cur_timestep += self.prog_overlap_step
                else:
                    self.cur_timestep += self.group_size
            if self.cur_timestep > self.max_timesteps:
                if self.roll_back:
                    self.roll_back_start()
                else:  # Clip
                    self.cur_timestep = self.max_timesteps

        else:
            raise ValueError(f"Invalid sample strategy: {self.sample_strategy}")

    def roll_back_start(self) -> None:
        """Roll back the current timestep to the init timestep"""
        self.cur_timestep = self.init_timestep
        self.cur_iter_in_group = 0

    def get_current_timesteps(self) -> List[int]:
        """Get the list of timesteps to train on in the current group.

        Returns:
            List[int]: List of timesteps to train on.
            For example, if cur_timestep=5 and group_size=2, returns [5, 6].
        """
        return list(range(self.cur_timestep, min(self.cur_timestep + self.group_size, self.max_timesteps)))

    def is_training_complete(self) -> bool:
        """Check if training is complete.

        Returns:
            bool: True if cur_timestep >= max_timesteps, False otherwise.
        """
        if self.sample_strategy in ["progressive", "decay"]:
            return self.cur_timestep >= self.max_timesteps

        return False


def sd3_time_shift(shift, t):
    return (shift * t) / (1 + (shift - 1) * t)


def flow_grpo_step(
    model_output: torch.Tensor,
    latents: torch.Tensor,
    eta: float,
    sigmas: torch.Tensor,
    index: int,
    prev_sample: torch.Tensor,
    generator: Optional[torch.Generator] = None,
    determistic: bool = False,
):
    device = model_output.device
    # step_index = [self.index_for_timestep(t) for t in timestep]
    # prev_step_index = [step+1 for step in step_index]
    sigma = sigmas[index].to(device)
    sigma_prev = sigmas[index + 1].to(device)
    sigma_max = sigmas[1].item()
    dt = sigma_prev - sigma  # neg dt

    pred_original_sample = latents - sigma * model_output

    std_dev_t = torch.sqrt(sigma / (1 - torch.where(sigma == 1, sigma_max, sigma))) * eta

    # our sde
    if prev_sample is not None and generator is not None:
        raise ValueError(
            "Cannot pass both generator and prev_sample. Please make sure that either `generator` or"
            " `prev_sample` stays `None`."
        )

    prev_sample_mean = (
        latents * (1 + std_dev_t**2 / (2 * sigma) * dt)
        + model_output * (1 + std_dev_t**2 * (1 - sigma) / (2 * sigma)) * dt
    )

    if prev_sample is None:
        variance_noise = randn_tensor(model_output.shape, generator=generator, device=device, dtype=model_output.dtype)
        prev_sample = prev_sample_mean + std_dev_t * torch.sqrt(-1 * dt) * variance_noise

    # No noise is added during evaluation
    if determistic:
        prev_sample = latents + dt * model_output

    log_prob = (
        -((prev_sample.detach() - prev_sample_mean) ** 2) / (2 * ((std_dev_t * torch.sqrt(-1 * dt)) ** 2))
        - torch.log(std_dev_t * torch.sqrt(-1 * dt))
        - torch.log(torch.sqrt(2 * torch.as_tensor(math.pi)))
    )

    # mean along all but batch dimension
    log_prob = log_prob.mean(dim=tuple(range(1, log_prob.ndim)))

    return prev_sample, pred_original_sample, log_prob, prev_sample_mean, std_dev_t * torch.sqrt(-1 * dt)


def reference_group_advantages(samples, args):
    n = len(samples["rewards"]) // (args.num_generations)
    advantages = torch.zeros_like(samples["rewards"])

    for i in range(n):
        start_idx = i * args.num_generations
        end_idx = (i + 1) * args.num_generations
        group_rewards = samples["rewards"][start_idx:end_idx]
        if args.trimmed_ratio > 0:
            sorted_rewards = torch.sort(group_rewards)[0]
            len_sorted_rewards = len(sorted_rewards)
            trim_size = min(int(len_sorted_rewards * args.trimmed_ratio), len_sorted_rewards - 1)
            trimmed_rewards = sorted_rewards[trim_size:]
            group_mean = trimmed_rewards.mean()
            group_std = trimmed_rewards.std() + 1e-8
        else:
            group_mean = group_rewards.mean()
            group_std = group_rewards.std() + 1e-8

        advantages[start_idx:end_idx] = (group_rewards - group_mean) / group_std

    samples["advantages"] = advantages
    return samples["advantages"]


def reference_policy_loss(args, sample, new_log_probs, _, train_timesteps):
    clip_range = args.clip_range
    adv_clip_max = args.adv_clip_max
    advantages = torch.clamp(
        sample["advantages"],
        -adv_clip_max,
        adv_clip_max,
    )

    ratio = torch.exp(new_log_probs - sample["log_probs"][:, _])

    unclipped_loss = -advantages * ratio
    clipped_loss = -advantages * torch.clamp(
        ratio,
        1.0 - clip_range,
        1.0 + clip_range,
    )
    clip_frac = torch.mean((torch.abs(ratio - 1.0) > clip_range).float())
    policy_loss = torch.mean(torch.maximum(unclipped_loss, clipped_loss)) / (
        args.gradient_accumulation_steps * len(train_timesteps)
    )
    kl_loss = (
        0.5
        * torch.mean((new_log_probs - sample["log_probs"][:, _]) ** 2)
        / (args.gradient_accumulation_steps * len(train_timesteps))
    )
    loss = policy_loss + args.kl_coeff * kl_loss
    return policy_loss, kl_loss, loss, ratio, clip_frac
