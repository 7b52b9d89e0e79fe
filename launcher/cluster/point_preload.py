"""The libraries a training run imports lazily, imported once by a local sweep's fork server.

Measured on the demo (issue 29): after torch, transformers, diffusers and the trainer, a point still imported ~1,400
modules while it ran (peft ~230, scipy ~490, torchvision ~180, matplotlib ~100, accelerate, and the family's diffusers
and transformers classes): seconds of every point, paid again by each process. The fork server imports them here
before it forks the first point (launcher/cluster/point_process.py); the family's own pipeline module comes from
its model config's ``preload_modules``. Importing starts no thread and touches no device.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # as launcher/tracking/plots.py: no display in a point

import matplotlib.pyplot  # noqa: E402,F401  (the reward curve)
import peft  # noqa: E402,F401  (LoRA)
import peft.tuners.lora  # noqa: E402,F401
import scipy.stats  # noqa: E402,F401  (imported by the libraries' samplers and statistics)
import torchvision.utils  # noqa: E402,F401  (image grids)
import transformers.modeling_utils  # noqa: E402,F401
