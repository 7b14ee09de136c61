"""``python -m actors NAME``: run one actor process (the supervisor starts them this way)."""

from __future__ import annotations

import sys

from actors import ACTORS, actor_class
from runtime.logs import setup_logging
from runtime.settings import settings_or_exit


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ACTORS:
        print(f"usage: python -m actors {{{','.join(ACTORS)}}}", file=sys.stderr)
        return 2
    settings = settings_or_exit()
    setup_logging(argv[0], settings.log_level)
    return actor_class(argv[0])(settings).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
