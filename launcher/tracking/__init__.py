"""What a run leaves for people to read: per-step metrics (``run_logger``: ``metrics.jsonl`` and the dashboard
backend), W&B online and offline (``wandb_logger``, the offline-file reader ``wandb_offline``), the plain log line
(``step_log``, ``log_files``), wall-clock per phase (``phase_timer``), the image grids and reward curve
(``plots``) and each sample as a file of its own, image or video (``media``); with the typed configs of ``logger=``. Named ``tracking``, not ``logging``, so that reading never
confuses it with the standard library's module.

A leaf room: it imports no other part of the launcher (docs/development.md#the-launchers-rooms).
"""
