"""The training run: the one trainer loop every method plugs into (``trainer``), the optimizer updates of a step
(``update_loop``, ``host_syncs``), the held-out evaluation (``evaluation``), the EMA of the weights, the optimizer and
its learning-rate schedule, and the prompt sources (``data``); with the typed configs of ``trainer.*``,
``optimizer.*``, ``eval.*`` and ``data=``.

It composes the other rooms: it may import ``launcher.checkpoint``, ``launcher.cluster``, ``launcher.plan``,
``launcher.tracking`` and the top-level ``launcher.components`` / ``launcher.validate``, plus methods, models, rewards
and rewardflow (docs/development.md#the-launchers-rooms).
"""
