"""``python -m launcher.compare ...`` is the same as ``rewardflow-compare ...``."""

import sys

from launcher.compare.cli import main

sys.exit(main())
