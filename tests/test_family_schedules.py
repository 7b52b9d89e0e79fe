"""Family sigma grids for ``method.schedule=scheduler`` against the families' own diffusers schedulers and pipeline
helpers, with the real checkpoints' scheduler configs (no model needed)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from methods.schedule import quantize_model_time, time_shift
from models.sigma_grids import custom_sigmas, static_shift_sigmas, unipc_flow_sigmas
from models.wan import wan_model_timestep

# scheduler/scheduler_config.json of the real checkpoints
FLUX_DEV = dict(
    base_image_seq_len=256,
    base_shift=0.5,
    max_image_seq_len=4096,
    max_shift=1.15,
    num_train_timesteps=1000,
    shift=3.0,
    use_dynamic_shifting=True,
)
QWEN_IMAGE = dict(
    base_image_seq_len=256,
    base_shift=0.5,
    invert_sigmas=False,
    max_image_seq_len=8192,
    max_shift=0.9,
    num_train_timesteps=1000,
    shift=1.0,
    shift_terminal=0.02,
    stochastic_sampling=False,
    time_shift_type="exponential",
    use_beta_sigmas=False,
    use_dynamic_shifting=True,
    use_exponential_sigmas=False,
    use_karras_sigmas=False,
)
SD35_MEDIUM = dict(num_train_timesteps=1000, shift=3.0)
WAN_T2V = dict(
    _class_name="UniPCMultistepScheduler",
    beta_end=0.02,
    beta_schedule="linear",
    beta_start=0.0001,
    flow_shift=3.0,
    final_sigmas_type="zero",
    lower_order_final=True,
    num_train_timesteps=1000,
    predict_x0=True,
    prediction_type="flow_prediction",
    solver_order=2,
    solver_type="bh2",
    timestep_spacing="linspace",
    use_flow_sigmas=True,
)


def _pipeline_grid(pipeline_module: str, config: dict, steps: int, image_seq_len: int) -> torch.Tensor:
    """What FluxPipeline / QwenImagePipeline do: custom sigmas linspace(1, 1/N, N) and mu from the token count."""
    import importlib

    from diffusers import FlowMatchEulerDiscreteScheduler

    mod = importlib.import_module(pipeline_module)
    sched = FlowMatchEulerDiscreteScheduler(**config)
    mu = mod.calculate_shift(
        image_seq_len,
        sched.config.get("base_image_seq_len", 256),
        sched.config.get("max_image_seq_len", 4096),
        sched.config.get("base_shift", 0.5),
        sched.config.get("max_shift", 1.15),
    )
    mod.retrieve_timesteps(sched, steps, "cpu", sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
    return sched.sigmas.double()


@pytest.mark.parametrize("height,width,steps", [(512, 512, 16), (1024, 1024, 28), (720, 1280, 50)])
def test_flux_grid_is_the_pipelines_resolution_dependent_shift(height, width, steps):
    seq = (height // 16) * (width // 16)
    expected = _pipeline_grid("diffusers.pipelines.flux.pipeline_flux", FLUX_DEV, steps, seq)
    ours = custom_sigmas(steps, 3.0, FLUX_DEV, seq, dynamic_shift=True)
    torch.testing.assert_close(ours, expected, rtol=0, atol=0)
    assert torch.equal(custom_sigmas(steps, 5.0, FLUX_DEV, seq, dynamic_shift=True), ours)
    static = custom_sigmas(steps, 3.0, FLUX_DEV, seq, dynamic_shift=False)
    s = torch.linspace(1, 1 / steps, steps, dtype=torch.float64)
    torch.testing.assert_close(static[:-1], time_shift(s, 3.0), rtol=0, atol=1e-6)  # model.dynamic_shift=false


@pytest.mark.parametrize("height,width,steps", [(512, 512, 20), (720, 720, 20), (1328, 1328, 50)])
def test_qwenimage_grid_is_the_pipelines_shift_with_terminal_sigma(height, width, steps):
    seq = (height // 16) * (width // 16)
    expected = _pipeline_grid("diffusers.pipelines.qwenimage.pipeline_qwenimage", QWEN_IMAGE, steps, seq)
    ours = custom_sigmas(steps, 3.0, QWEN_IMAGE, seq, dynamic_shift=True)
    torch.testing.assert_close(ours, expected, rtol=0, atol=0)
    assert float(ours[0]) == pytest.approx(1.0) and float(ours[-2]) == pytest.approx(0.02, abs=1e-6)
    assert float(ours[-1]) == 0.0


def test_sd35_grid_is_the_static_shift_with_the_doubly_shifted_endpoint():
    from diffusers import FlowMatchEulerDiscreteScheduler

    sched = FlowMatchEulerDiscreteScheduler(**SD35_MEDIUM)
    sched.set_timesteps(10)
    ours = static_shift_sigmas(10, 3.0, dict(sched.config))
    torch.testing.assert_close(ours, sched.sigmas.double(), rtol=0, atol=0)
    sigma_min = float(time_shift(torch.tensor(1e-3, dtype=torch.float64), 3.0))  # 0.002994, shifted once
    assert float(ours[-2]) == pytest.approx(float(time_shift(torch.tensor(sigma_min), 3.0)), rel=1e-5)
    torch.testing.assert_close(sched.timesteps.double(), ours[:-1] * 1000, rtol=1e-6, atol=1e-4)  # SD3 sees 1000 sigma


@pytest.mark.parametrize("steps", [12, 20, 50])
def test_wan_grid_is_unipc_flow_sigmas_and_timesteps_are_its_int64(steps):
    from diffusers import UniPCMultistepScheduler

    sched = UniPCMultistepScheduler.from_config(WAN_T2V)
    sched.set_timesteps(steps)
    ours = unipc_flow_sigmas(steps, 3.0, WAN_T2V)
    assert ours[0] == 1.0 and abs(float(sched.sigmas[0]) - 1) < 1e-5  # UniPC's -1e-6 guard undone
    torch.testing.assert_close(ours[1:], sched.sigmas[1:].double(), rtol=0, atol=0)
    assert ours[-1] == 0 and len(ours) == steps + 1
    # the transformer receives UniPC's own int64 timesteps at every step (999 at sigma = 1)
    assert torch.equal(wan_model_timestep(ours[:-1].float()).long(), sched.timesteps)
    shift5 = unipc_flow_sigmas(steps, 5.0, WAN_T2V)  # 720p: flow_shift 5 via method.shift
    assert (shift5[1:-1] > ours[1:-1]).all()


def test_wan_integer_timesteps_survive_dancegrpo_quantisation_in_float32():
    """DanceGRPO feeds Wan the integer floor(1000 sigma); the method passes floor(1000 sigma)/1000 as float32 and the
    adapter recovers exactly that integer (capped at 999)."""
    sigma = torch.cat([torch.linspace(1, 0, 1001, dtype=torch.float64), torch.rand(2000, dtype=torch.float64)])
    q = quantize_model_time(sigma).float()
    assert torch.equal(wan_model_timestep(q), torch.floor(sigma * 1000.0).clamp(max=999))
