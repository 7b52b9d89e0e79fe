"""One rule tells an evaluation's metrics and rows from training's (launcher/tracking/metric_names.py), for the run
log's resume and for rewardflow-compare alike."""

from __future__ import annotations

from launcher.compare.runs import axis_key
from launcher.tracking.metric_names import is_evaluation, is_evaluation_row
from launcher.tracking.run_logger import is_eval_row


def test_held_out_and_validation_metrics_are_evaluations_everywhere():
    for key in ("eval/hps/mean", "val/jpeg/mean"):
        assert is_evaluation(key)
        assert axis_key("wallclock_s", key) == "time/eval_wallclock_s"
        assert is_eval_row({"step": 3, key: 0.5}) and is_evaluation_row({"step": 3, key: 0.5})
    for key in ("reward/mean", "loss", "health/first_update_clip_frac"):
        assert not is_evaluation(key)
        assert axis_key("wallclock_s", key) == "time/wallclock_s"
    assert not is_eval_row({"step": 3, "reward/mean": 0.5, "time/wallclock_s": 1.0})
