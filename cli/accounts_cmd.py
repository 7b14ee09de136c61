"""``run.py accounts add|list|disable|enable|role|password``: the console's operator accounts.

They live in the console's own database (``<data_dir>/console.sqlite3``, console/
account_store.py), which this command opens directly: it works with the tree stopped, and
whoever may write the data directory manages the accounts. Each change is committed with
its audit record (with the ``os_user`` who ran the command); the console sends the records
to the audit trail as soon as it runs.

A password is never an argument: it is asked twice at a terminal, or read as the first line
of standard input (``printf '%s\\n' "$PW" | python run.py accounts add ...``).
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from datetime import datetime
from typing import TYPE_CHECKING, TextIO, cast, get_args

from cli.whoami import os_user
from messages.replay import Role
from runtime.settings import Settings

if TYPE_CHECKING:
    from console.account_store import AccountStore

ROLES = get_args(Role)

EXIT_OK, EXIT_ERROR = 0, 1
_NAME = "the account's name (what its owner signs in with)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="accounts_command", required=True)
    add = sub.add_parser("add", help="create an account (the password is asked, or read "
                         "from standard input)")
    add.add_argument("name", help=_NAME)
    add.add_argument("--role", choices=ROLES, required=True,
                     help="viewer: follows replays; operator: also answers them; admin: "
                          "also sees the accounts in the console")
    listed = sub.add_parser("list", help="every account, its role and state")
    listed.add_argument("--json", action="store_true", help="one JSON object per account")
    for verb, text in (("disable", "refuse its sign-ins and end its sessions"),
                       ("enable", "allow its sign-ins again")):
        sub.add_parser(verb, help=text).add_argument("name", help=_NAME)
    role = sub.add_parser("role", help="change an account's role (applies at once)")
    role.add_argument("name", help=_NAME)
    role.add_argument("role", choices=ROLES, help="the new role")
    password = sub.add_parser("password", help="set a new password (ends its sessions)")
    password.add_argument("name", help=_NAME)


def read_password(name: str, stdin: TextIO = sys.stdin) -> str:
    """Asked twice at a terminal; otherwise the first line of standard input."""
    if stdin.isatty():
        first = getpass.getpass(f"password for {name}: ")
        if getpass.getpass("again: ") != first:
            raise ValueError("the two passwords differ")
        return first
    line = stdin.readline()
    if not line:
        raise ValueError("no password on standard input")
    return line.rstrip("\r\n")


def run(settings: Settings, args: argparse.Namespace) -> int:
    # Imported here: run.py's parser is built by the Windows agent's `run.py agent` too, and
    # the console (argon2) is not part of the agent's folder.
    from console.account_store import AccountStore
    from console.accounts import hash_password, name_problem, password_problem

    command = args.accounts_command
    store = AccountStore.in_dir(settings.data_dir)
    by = {"os_user": os_user(), "via": "command_line"}
    try:
        if command == "list":
            return _list(store, args.json)
        name = args.name.strip().lower()
        if command == "add":
            if (problem := name_problem(name)) is not None:
                raise ValueError(problem)
            password = read_password(name)
            if (problem := password_problem(name, password)) is not None:
                raise ValueError(problem)
            store.add(name, cast(Role, args.role), hash_password(password), time.time(), by)
            print(f"account {name} added ({args.role})")
        elif command in ("disable", "enable"):
            store.change(name, time.time(), by, disabled=command == "disable")
            print(f"account {name} {command}d")
        elif command == "role":
            store.change(name, time.time(), by, role=cast(Role, args.role))
            print(f"account {name} is now {args.role}")
        else:
            password = read_password(name)
            if (problem := password_problem(name, password)) is not None:
                raise ValueError(problem)
            store.change(name, time.time(), by, password_hash=hash_password(password))
            print(f"account {name}: new password set; its open sessions are ended")
        return EXIT_OK
    except (ValueError, LookupError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        store.close()


def _list(store: AccountStore, as_json: bool) -> int:
    accounts = store.accounts()
    if as_json:
        for a in accounts:
            print(json.dumps({"name": a.name, "role": a.role, "disabled": a.disabled,
                              "created_at": a.created_at}))
        return EXIT_OK
    if not accounts:
        print("no accounts: create one with python run.py accounts add NAME --role operator")
    for a in accounts:
        created = datetime.fromtimestamp(a.created_at).strftime("%Y-%m-%d %H:%M")
        print(f"{a.name:<24} {a.role:<9} {'DISABLED' if a.disabled else 'active':<9} "
              f"created {created}")
    return EXIT_OK
