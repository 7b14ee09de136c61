"""``python -m tests.as_user USER run.py ARGS...``: the command line, run as OS account USER.

What ``runuser -u USER -- python run.py ARGS`` would do, for an interpreter that account
cannot open: on the test machines Python lives under root's home (mode 0700), where another
account cannot even start it. So this starts as root, imports the command line's code while
it may still read it, then becomes USER for good (its groups, gid, uid: ``initgroups``,
``setgid``, ``setuid``) before the command opens any socket or file. The server sees USER
from the kernel (SO_PEERCRED is taken at connect), as it would for a person's shell.
"""

from __future__ import annotations

import os
import pwd
import sys


def become(user: str) -> None:
    entry = pwd.getpwnam(user)
    os.initgroups(user, entry.pw_gid)
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    if os.getuid() != entry.pw_uid or os.geteuid() != entry.pw_uid:
        raise SystemExit(f"could not become {user}")
    os.environ.update(HOME=entry.pw_dir, USER=user, LOGNAME=user)


def main() -> int:
    user, script, *args = sys.argv[1:]
    if script != "run.py":
        raise SystemExit("usage: python -m tests.as_user USER run.py ARGS...")
    # Everything the replay and audit commands import, before root's files are out of reach:
    # their modules, the parser's (it imports every command's options), pyzmq's monitor.
    import zmq.utils.monitor  # noqa: F401

    import cli.audit_cmd
    import cli.main
    import cli.replay_cmd

    cli.main.build_parser()
    become(user)
    return cli.main.main(args)


if __name__ == "__main__":
    sys.exit(main())
