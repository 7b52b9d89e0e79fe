"""What the method benches (bench_jagg.py, bench_flash.py, bench_eam.py) price their ideal ratios with: the
transformer calls a method actually makes, and the measured cost of one call of each size.

:class:`CallRecorder` records every call of the transformer while it is on: its rows (CFG rows included) and whether
it builds a graph (its output requires grad, so it is back-propagated once: every method does). After the measured
rounds, :func:`probe_costs` times one call of each recorded kind on the same model, at the same
``method.update_batch`` the methods ran with: a graph-free forward, or a forward with graph and its backward. The
ideal time of a phase is then :func:`priced`: the sum over its calls of the probed costs, i.e. exactly the
transformer work of the calls made, at the batch sizes they were made at, with no overhead.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter

import torch


class CallRecorder:
    """Forward hook on ``backbone.transformer``: ``(rows, with_graph)`` of each call while :attr:`active`."""

    def __init__(self, backbone):
        self.active = False
        self.calls: Counter[tuple[int, bool]] = Counter()

        def hook(module, args, kwargs, output):
            if self.active:
                x = kwargs.get("hidden_states", args[0] if args else None)
                out = output[0] if isinstance(output, (tuple, list)) else output
                self.calls[(int(x.shape[0]), bool(torch.is_tensor(out) and out.requires_grad))] += 1

        self._handle = backbone.transformer.register_forward_hook(hook, with_kwargs=True)

    def take(self) -> Counter:
        """The calls recorded since the last take."""
        out, self.calls = self.calls, Counter()
        return out


def record_update_calls(trainer) -> CallRecorder:
    """A :class:`CallRecorder` on the trainer's model that records during its update loop only."""
    recorder = CallRecorder(trainer.backbone)
    run = trainer.updates.run

    def recorded(rollout, generator):
        recorder.active = True
        try:
            return run(rollout, generator)
        finally:
            recorder.active = False

    trainer.updates.run = recorded
    return recorder


def probe_costs(backbone, kinds, reps: int, clock: str) -> dict[tuple[int, bool], float]:
    """Median seconds of one call of each kind ``(transformer rows, with_graph)``: a graph-free forward, or a forward
    and the backward of its output. ``clock``: ``cpu`` (process CPU time, steady on a shared machine with one
    thread) or ``wall`` (the device synchronised around each call, so a GPU's queued work counts where it was
    queued)."""
    embeds = backbone.encode_prompts(["a red square"])
    params = list(backbone.trainable_parameters())
    device, per_sample = backbone.device, backbone.rows_per_sample

    def now() -> float:
        if clock == "cpu":
            return time.process_time()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    out: dict[tuple[int, bool], list[float]] = {}
    for _ in range(reps):
        for rows, graph in sorted(kinds):
            n = max(1, rows // per_sample)
            x = torch.randn(n, *backbone.latent_shape, device=device)
            t = torch.linspace(0.2, 0.9, n, device=device)
            e = embeds.select([0] * n)
            t0 = now()
            if graph:
                v = backbone.velocity(x, t, e)
                v.backward(torch.randn_like(v))
            else:
                with torch.no_grad():
                    backbone.velocity(x, t, e)
            out.setdefault((rows, graph), []).append(now() - t0)
            for p in params:
                p.grad = None
    return {k: statistics.median(v) for k, v in out.items()}


def priced(calls: Counter, costs: dict[tuple[int, bool], float]) -> float:
    """Seconds of the transformer work of ``calls`` at the probed ``costs``."""
    return sum(count * costs[kind] for kind, count in calls.items())


def describe(calls: Counter) -> str:
    """``8x(8 rows, graph) + 2x(4 rows)`` style summary of a phase's calls."""
    return " + ".join(f"{n}x({rows} rows{', graph' if graph else ''})" for (rows, graph), n in sorted(calls.items()))
