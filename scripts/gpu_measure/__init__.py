"""The GPU check's parts (scripts/gpu_check.py): time guard, JSON lines, timing and FLOP counting, and one module per
group of sections."""
