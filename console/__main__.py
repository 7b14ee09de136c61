"""``python -m console``: the supervisor console (the supervisor starts it this way)."""

from __future__ import annotations

import sys

from console.server import run
from runtime.logs import setup_logging
from runtime.settings import load_settings

if __name__ == "__main__":
    settings = load_settings()
    setup_logging("console", settings.log_level)
    sys.exit(run(settings))
