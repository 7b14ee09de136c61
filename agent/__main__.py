"""``python -m agent --machine-id M ...``: run one agent (same flags as ``run.py agent``)."""

from __future__ import annotations

import argparse
import sys

from agent import command as agent_cmd
from runtime.settings import load_settings


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent",
                                     description="Léa workstation agent")
    agent_cmd.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
    except (OSError, ValueError) as exc:
        print(f"error: invalid settings: {exc}", file=sys.stderr)
        return 2
    return agent_cmd.run(settings, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
