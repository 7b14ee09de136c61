"""``python -m agent --machine-id M ...``: run one agent (same flags as ``run.py agent``)."""

from __future__ import annotations

import argparse
import sys

from agent import command as agent_cmd
from runtime.settings import settings_or_exit


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent",
                                     description="Léa workstation agent")
    agent_cmd.add_arguments(parser)
    args = parser.parse_args(argv)
    return agent_cmd.run(settings_or_exit(), args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
