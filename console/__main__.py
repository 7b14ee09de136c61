"""``python -m console``: the supervisor console (the supervisor starts it this way)."""

from __future__ import annotations

import sys

from console.server import run
from runtime.logs import setup_logging
from runtime.settings import settings_or_exit

if __name__ == "__main__":
    settings = settings_or_exit()
    setup_logging("console", settings.log_level)
    sys.exit(run(settings))
