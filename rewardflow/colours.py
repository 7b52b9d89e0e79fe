"""The named colours and their RGB values in [0, 1], the table two layers share: the colour reward scores an image
against the colour its prompt names (``rewards/color.py``), and the tiny twins' VAE pre-training paints these colours
so that its decoder can show them (``models/tiny_pretrain.py``). It lives in the ground layer because a model may not
import a reward (docs/development.md#layers-and-rooms). Plain data and the one rule that reads it, with no heavy import.
"""

import re

_WORD = re.compile(r"[a-z]+")

COLOURS = {
    "red": (1.0, 0.0, 0.0),
    "green": (0.0, 1.0, 0.0),
    "blue": (0.0, 0.0, 1.0),
    "yellow": (1.0, 1.0, 0.0),
    "cyan": (0.0, 1.0, 1.0),
    "magenta": (1.0, 0.0, 1.0),
    "white": (1.0, 1.0, 1.0),
    "black": (0.0, 0.0, 0.0),
    "orange": (1.0, 0.5, 0.0),
    "purple": (0.5, 0.0, 0.5),
    "pink": (1.0, 0.75, 0.8),
    "gray": (0.5, 0.5, 0.5),
    "grey": (0.5, 0.5, 0.5),
}


def named_colours(prompt: str) -> list[str]:
    """The colours of :data:`COLOURS` that ``prompt`` names, in order."""
    return [w for w in _WORD.findall(prompt.lower()) if w in COLOURS]
