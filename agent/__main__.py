"""``python -m agent --machine-id M ...``: run one agent (same flags as ``run.py agent``, and
``--config FILE``, the settings' TOML file). An argument ``@FILE`` stands for the lines of
FILE, one argument a line (UTF-16 with its BOM, as the Windows installer writes it, or
UTF-8): the installed agent's whole command line is ``-m agent @...\agent.args``.

``python -m agent status --data-dir DIR`` (or ``--machine-id M``, the default data folder):
say whether that agent runs, its server link, its monitors, its last action
(agent/status.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent import command as agent_cmd
from runtime.settings import settings_or_exit


def status(argv: list[str]) -> int:
    from agent import status as agent_status

    parser = argparse.ArgumentParser(prog="python -m agent status",
                                     description="Is the Léa agent running, and how")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--data-dir", type=Path, help="the agent's data folder")
    where.add_argument("--machine-id", help="the agent's id (its default data folder)")
    args = parser.parse_args(argv)
    data_dir = args.data_dir
    if data_dir is None:
        data_dir = agent_status.default_data_dir(settings_or_exit(), args.machine_id)
    return agent_status.main(data_dir)


def expand_args_files(argv: list[str]) -> list[str]:
    """``argv`` with each ``@FILE`` replaced by FILE's non-blank lines (``#``: a comment)."""
    out: list[str] = []
    for arg in argv:
        if not arg.startswith("@"):
            out.append(arg)
            continue
        raw = Path(arg[1:]).read_bytes()
        text = raw.decode("utf-16") if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else raw.decode(
            "utf-8-sig")
        out += [line.strip() for line in text.splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    return out


def main(argv: list[str]) -> int:
    try:
        argv = expand_args_files(argv)
    except (OSError, UnicodeError) as exc:
        print(f"error: cannot read an @ arguments file: {exc}", file=sys.stderr)
        return 2
    if argv[:1] == ["status"]:
        return status(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m agent",
                                     description="Léa workstation agent")
    agent_cmd.add_arguments(parser)
    parser.add_argument("--config", metavar="FILE",
                        help="the settings' TOML file ([lea] table; default LEA_CONFIG)")
    args = parser.parse_args(argv)
    return agent_cmd.run(settings_or_exit(args.config), args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
