"""The sigma grids a method can sample on (:mod:`methods.schedule`)."""

from __future__ import annotations

from enum import StrEnum


class Schedule(StrEnum):
    linear_shift = "linear_shift"  # s_i = 1 - i/N, then the SD3 time shift S (DanceGRPO, on every model)
    scheduler = "scheduler"  # the model family's own diffusers scheduler grid, set up as its pipeline does
