"""``rewardflow-compare``: methods side by side at equal compute.

Pipeline, one module per concept:

- :mod:`.runs`       the :class:`RunData` record every source is turned into, and config-key helpers;
- :mod:`.local`      run and sweep folders (``metrics.jsonl`` + ``.hydra/config.yaml``, or offline W&B files);
- :mod:`.online`     W&B projects, groups and sweeps through the public API (``wandb.Api``);
- :mod:`.grouping`   filters, grouping by method (and any config key), the checks that refuse mixed groups;
- :mod:`.metric`     which metric is compared: the held-out evaluation when runs have it, else the training reward;
- :mod:`.stats`      means over seeds with t intervals (log scale for positive quantities), paired tests, Holm;
- :mod:`.completeness` which runs finished (the others are named and left out);
- :mod:`.aggregate`  seed curves on a common grid, final value, per-step cost, equal-budget and time-to-target figures;
- :mod:`.evidence`   the thin-evidence warnings (few seeds or points, short runs, a loaded machine...);
- :mod:`.report`     the Markdown tables and ``comparison.json``;
- :mod:`.plots`      the PNG figures;
- :mod:`.publish`    the optional W&B report (or, without the report API, a summary W&B run);
- :mod:`.cli`        the argparse command tying them together;
- :mod:`.dashboard`  ``rewardflow-dashboard``: a W&B workspace of the metric families (``launcher.tracking.metric_names``),
  its JSON spec, and :mod:`.dashboard_preview`, the same panels drawn from local runs.

Of the rest of the launcher it imports only ``launcher.tracking`` (the offline W&B reader, the metric names, W&B's mode); it reads run folders,
never the trainer (docs/development.md#the-launchers-rooms).
"""

from launcher.compare.errors import CompareError

__all__ = ["CompareError"]
