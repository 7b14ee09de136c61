"""``python -m console``: the supervisor console (the supervisor starts it this way)."""

from __future__ import annotations

import sys

from broker.config import load_settings
from broker.logs import setup_logging
from console.server import run

if __name__ == "__main__":
    settings = load_settings()
    setup_logging("console", settings.log_level)
    sys.exit(run(settings))
