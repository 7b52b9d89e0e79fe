"""The guided forward of a diffusers backbone: true classifier-free guidance in one batched transformer call.

Owns: :class:`GuidanceMixin` (``guidance_scale``, ``do_cfg``, ``rows_per_sample``, ``guided_velocity``,
``cfg_combine``) and the autocast every velocity forward runs under. Families with true CFG (SD3.5, Qwen-Image,
Wan2.1) route ``velocity`` through :meth:`GuidanceMixin.guided_velocity`; FLUX.1-dev's guidance is a distilled
embedding, so it calls the transformer itself under :meth:`GuidanceMixin._autocast`. Which module evaluates (the
policy or the frozen reference) is ``self._active`` (``models/frozen_reference.py``).
"""

from __future__ import annotations

from typing import Any

import torch


class GuidanceMixin:
    #: true-CFG scale; families with CFG set it per instance (FLUX.1-dev's guidance is embedded, so no CFG)
    guidance_scale: float = 1.0
    guidance_attr: str | None = "guidance_scale"

    device: torch.device
    dtype: torch.dtype  # the compute dtype
    _active: Any  # the transformer that evaluates: the policy or the frozen reference (models/frozen_reference.py)

    @property
    def do_cfg(self) -> bool:
        """True CFG (one forward over ``[uncond, cond]``) when the family's ``guidance_scale`` exceeds 1."""
        return self.guidance_scale > 1.0

    @property
    def rows_per_sample(self) -> int:
        return 2 if self.do_cfg else 1

    def guided_velocity(
        self,
        latents: torch.Tensor,
        timestep: torch.Tensor,
        cond: dict[str, torch.Tensor],
        uncond: dict[str, torch.Tensor | None],
        renorm_dim: int | None = None,
        **shared: object,
    ) -> torch.Tensor:
        """The transformer's fp32 prediction for ``latents`` at ``timestep`` (the family's time input), with true
        classifier-free guidance when :attr:`do_cfg`: ONE forward over the rows ``[uncond, cond]`` (``uncond``: the
        negative prompt's tensors, each of batch 1, broadcast to the batch; the same keys as ``cond``) combined by
        :meth:`cfg_combine`; otherwise the conditional forward alone. ``shared``: keyword arguments of the forward
        that do not depend on the row."""
        x, t, inputs = latents, timestep, cond
        if self.do_cfg:
            b = latents.shape[0]
            inputs = {}
            for k, v in cond.items():
                u = uncond[k]
                assert u is not None  # do_cfg: encode_prompts added the negative prompt's tensors
                inputs[k] = torch.cat([u.expand(b, *u.shape[1:]), v])
            x, t = torch.cat([x, x]), torch.cat([t, t])
        with self._autocast():
            out = self._active(hidden_states=x, timestep=t, **inputs, **shared, return_dict=False)[0].float()
        if not self.do_cfg:
            return out
        v_u, v_c = out.chunk(2)
        return self.cfg_combine(v_u, v_c, self.guidance_scale, renorm_dim)

    @staticmethod
    def cfg_combine(
        v_uncond: torch.Tensor, v_cond: torch.Tensor, scale: float, renorm_dim: int | None = None
    ) -> torch.Tensor:
        """``v_u + w (v_c - v_u)``; with ``renorm_dim`` the result is rescaled to the conditional prediction's norm
        along that dim (Qwen-Image's pipeline does this per token)."""
        v = v_uncond + scale * (v_cond - v_uncond)
        if renorm_dim is not None:
            v = v * (v_cond.norm(dim=renorm_dim, keepdim=True) / v.norm(dim=renorm_dim, keepdim=True))
        return v

    def _autocast(self):
        """Autocast to the compute dtype, for the policy and the reference alike: a reference stored below it reads
        its weights in the compute dtype, sharded (FSDP2's gather) or not (models/frozen_reference.py)."""
        return torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32)
