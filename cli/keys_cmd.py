"""``run.py keys generate``: the CURVE key pairs of the broker and of agents.

The layout is in transport/curve_keys.py. An existing key is never overwritten: a new server key
would lock every agent out, a new agent key would orphan the one in the allow-list.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from runtime.durability import fsync_dir, fsync_file, write_atomic
from runtime.settings import Settings

_NAME_HELP = "agent name (its machine id): letters, digits, '_', '.', '-'"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="keys_command", required=True)
    gen = sub.add_parser("generate", help="the server key pair (once) and agent key pairs")
    gen.add_argument("--dir", metavar="DIR",
                     help="keys directory (default: settings keys_dir, <data_dir>/keys)")
    gen.add_argument("--agent", action="append", default=[], metavar="M", help=_NAME_HELP +
                     "; one key pair in agents/ per --agent (repeatable)")
    gen.add_argument("--allow", action="store_true",
                     help="also put those agents' public keys in allowed/ (the allow-list)")


def _pair(directory: Path, name: str) -> tuple[Path, Path, bool]:
    """(public, secret, created): make ``name``'s pair in ``directory`` unless it exists."""
    import zmq.auth

    public, secret = directory / f"{name}.key", directory / f"{name}.key_secret"
    if public.exists() or secret.exists():
        return public, secret, False
    directory.mkdir(parents=True, exist_ok=True)
    old = os.umask(0o077)  # the secret is for its owner only, from its first byte on
    try:
        made_public, made_secret = zmq.auth.create_certificates(directory, name)
    finally:
        os.umask(old)
    os.chmod(made_public, 0o644)
    # pyzmq writes the files in place: make them and their names durable before anyone
    # relies on them (a power cut must not leave an empty key, docs/durability.md).
    for made in (made_public, made_secret):
        fsync_file(Path(made))
    fsync_dir(directory)
    fsync_dir(directory.parent)
    return Path(made_public), Path(made_secret), True


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Create what is missing and say where everything is; 2 on a bad name or an I/O error."""
    from agent.process import MACHINE_ID
    from transport.curve_keys import KeyLayout

    layout = KeyLayout(Path(args.dir) if args.dir else settings.keys_path)
    bad = [name for name in args.agent if not MACHINE_ID.match(name)]
    if bad:
        print(f"error: invalid agent name(s) {', '.join(map(repr, bad))}: {_NAME_HELP}",
              file=sys.stderr)
        return 2
    try:
        layout.allowed.mkdir(parents=True, exist_ok=True)
        public, secret, created = _pair(layout.root, "server")
        print(f"server: {'created' if created else 'kept'} {public} (give it to every agent)"
              f" and {secret} (stays here)")
        for name in args.agent:
            public, secret, created = _pair(layout.agent_public(name).parent, name)
            print(f"agent {name}: {'created' if created else 'kept'} {secret} (for that "
                  f"workstation only, --agent-key) and {public}")
            if args.allow:
                write_atomic(layout.allowed / public.name, public.read_bytes())
                print(f"agent {name}: allowed ({layout.allowed / public.name})")
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"allow-list: {layout.allowed} (one agent public key per *.key file; read again "
          "at each connection, no restart needed)")
    return 0
