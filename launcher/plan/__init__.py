"""The memory planner: per-rank GPU memory of a composed run from configs alone (docs/memory.md). ``model_sizes``
reads a model's configs and sizes, ``activations`` what a transformer call keeps (from the calibration in
``coefficients``), ``memory_plan`` adds it up per phase, ``fixes`` finds the changes that make a run fit and checks a
GPU run at start, ``cli`` is ``rewardflow ... --plan``.

It imports neither torch nor the model libraries at module level; it may import models' light config modules and,
to compose a command line, the top-level ``launcher.config`` and ``launcher.installation``
(docs/development.md#the-launchers-rooms).
"""
