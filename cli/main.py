"""Argument parsing for ``python run.py``; each command lives in its own module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from actors import ACTORS
from runtime.settings import Settings, settings_or_exit


def build_parser() -> argparse.ArgumentParser:
    """Every command and option of ``python run.py``."""
    parser = argparse.ArgumentParser(
        prog="python run.py",
        description="Léa replay orchestrator. Without a command: 'up'.",
    )
    _add_global_options(parser, None)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("up", help="start the broker and the actors under the supervisor")
    sub.add_parser("broker", help="run the broker alone (the supervisor does this)")
    sub.add_parser("console", help="run the supervisor console alone (the supervisor does "
                   "this)")
    actor = sub.add_parser("actor", help="run one actor alone (the supervisor does this)")
    actor.add_argument("name", choices=sorted(ACTORS), help="which actor")
    tap = sub.add_parser("tap", help="print bus events live")
    tap.add_argument("prefix", nargs="?", default="lea:",
                     help="print the events whose topic starts with this (default lea:)")
    tap.add_argument("--json", action="store_true", help="JSON lines")
    ping = sub.add_parser("ping", help="call every service and print its round trip")
    ping.add_argument("services", nargs="*", help="default: the six actors")
    ping.add_argument("--json", action="store_true", help="one JSON object per service")
    ping.add_argument("--timeout", type=float, default=2.0, help="seconds per service")
    brokers = sub.add_parser("brokers", help="each broker's role and state (a pair's too)")
    brokers.add_argument("--json", action="store_true", help="one JSON object per broker")
    brokers.add_argument("--timeout", type=float, default=2.0, help="seconds per broker")
    demo = sub.add_parser("demo", help="run the example workflow end to end, here")
    demo.add_argument("workflow", nargs="?", type=Path, help="default: the example")
    demo.add_argument("--ollama-stub", action="store_true",
                      help="Léa's contextual checks from a stand-in Ollama (no model here)")
    demo.add_argument("--queue", action="store_true",
                      help="a work queue of three patients on two workstations, one showing "
                           "another patient's record (docs/queues.md)")
    from agent import command as agent_cmd
    from cli import keys_cmd, replay_cmd, workflow_cmd

    agent_cmd.add_arguments(sub.add_parser("agent", help="run a workstation agent"))
    replay_cmd.add_arguments(sub.add_parser("replay", help="start, follow, resume, cancel"))
    workflow_cmd.add_arguments(sub.add_parser("workflow", help="workflow schema and checks"))
    from cli import audit_cmd

    audit_cmd.add_arguments(sub.add_parser("audit", help="audit trail: show, verify, export, "
                                           "prune"))
    from cli import queue_cmd

    queue_cmd.add_arguments(sub.add_parser("queue", help="work queues: one workflow over many "
                                           "items, on a pool of agents (docs/queues.md)"))
    keys_cmd.add_arguments(sub.add_parser("keys", help="CURVE key pairs (server, agents)"))
    from cli import accounts_cmd

    accounts_cmd.add_arguments(sub.add_parser("accounts", help="the console's operator "
                                              "accounts: add, list, disable, role, password"))
    for _name, inner in list(every_parser(parser)):
        if inner is not parser:
            _add_global_options(inner, argparse.SUPPRESS)
    return parser


def _add_global_options(parser: argparse.ArgumentParser, default: object) -> None:
    """The options every command takes, before or after its name (docs/operations.md). Under
    a subcommand they default to SUPPRESS, so that one not repeated there keeps the value
    given before it; an option the subcommand defines itself (the agent's own --data-dir) is
    its own."""
    taken = set(parser._option_string_actions)
    group = parser if default is None else parser.add_argument_group(
        "global options (accepted before or after the command)")
    if "--config" not in taken:
        group.add_argument("--config", default=default, metavar="FILE",
                           help="TOML file with a [lea] table of settings")
    if "--data-dir" not in taken:
        group.add_argument("--data-dir", default=default, metavar="DIR",
                           help="where state is kept (default var/; also LEA_DATA_DIR)")
    if "--curve" not in taken:
        group.add_argument("--curve", action="store_true", default=default,
                           help="CURVE: the broker also listens on curve_endpoint for agents "
                                "with an allowed key; an agent connects with CURVE (also "
                                "LEA_CURVE=1)")
    if "--console-port" not in taken:
        group.add_argument("--console-port", type=int, default=default, metavar="PORT",
                           help="the supervisor console's port on 127.0.0.1 (default 8765; "
                                "0 = no console; also LEA_CONSOLE_PORT)")


def every_parser(parser: argparse.ArgumentParser,
                 path: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``parser`` and every subcommand's parser under it, with the command words that reach
    it (argparse keeps them in a private list: read here only)."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, inner in action.choices.items():
                yield from every_parser(inner, f"{path} {name}".strip())


def _curve_keys_missing(settings: Settings) -> bool:
    """With --curve, say so (and True) if the broker's keys cannot be read: here, not
    through a broker crash-looping in the tree."""
    if not settings.curve:
        return False
    from broker.curve_listener import server_keys_problem

    problem = server_keys_problem(settings.keys_path)
    if problem:
        print(f"error: --curve: {problem}", file=sys.stderr)
    return problem is not None


def _up(settings: Settings, _args: argparse.Namespace) -> int:
    from supervision.tree import run_tree

    if _curve_keys_missing(settings):
        return 2
    from console.startup_checks import startup_problem

    if (problem := startup_problem(settings)) is not None:
        print(f"error: console: {problem}", file=sys.stderr)
        return 2
    if _settings_refused():
        return 2
    return run_tree(settings)


def _settings_refused() -> bool:
    """Say so (and True) if an actor's setting cannot be honoured: the tree does not start
    with a setting that would do nothing or something else than it says."""
    from actors.settings_check import settings_problems

    problems = settings_problems()
    for problem in problems:
        print(f"error: setting {problem}", file=sys.stderr)
    return bool(problems)


def _console(settings: Settings, _args: argparse.Namespace) -> int:
    from console.server import run
    from runtime.logs import setup_logging

    setup_logging("console", settings.log_level)
    return run(settings)


def _broker(settings: Settings, _args: argparse.Namespace) -> int:
    from broker.broker import Broker
    from runtime.logs import setup_logging

    if _curve_keys_missing(settings):
        return 2
    setup_logging("broker", settings.log_level)
    return Broker(settings).run()


def _actor(settings: Settings, args: argparse.Namespace) -> int:
    from actors import actor_class
    from runtime.logs import setup_logging

    if _settings_refused():
        return 2
    setup_logging(args.name, settings.log_level)
    return actor_class(args.name)(settings).run()


def _tap(settings: Settings, args: argparse.Namespace) -> int:
    from cli.tap import tap

    return tap(settings, args.prefix, args.json)


def _ping(settings: Settings, args: argparse.Namespace) -> int:
    from cli.ping import ping

    return ping(settings, args.services or None, args.json, args.timeout)


def _brokers(settings: Settings, args: argparse.Namespace) -> int:
    from cli.brokers import brokers

    return brokers(settings, args.json, args.timeout)


def _agent(settings: Settings, args: argparse.Namespace) -> int:
    from agent.command import run

    return run(settings, args)


def _replay(settings: Settings, args: argparse.Namespace) -> int:
    from cli.replay_cmd import run

    return run(settings, args)


def _demo(settings: Settings, args: argparse.Namespace) -> int:
    if args.queue:
        from cli import demo_queue

        return demo_queue.run(settings)
    from cli.demo import EXAMPLE, run

    return run(settings, args.workflow or EXAMPLE, ollama_stub=args.ollama_stub)


def _queue(settings: Settings, args: argparse.Namespace) -> int:
    from cli.queue_cmd import run

    return run(settings, args)


def _keys(settings: Settings, args: argparse.Namespace) -> int:
    from cli.keys_cmd import run

    return run(settings, args)


def _workflow(_settings: Settings, args: argparse.Namespace) -> int:
    from cli.workflow_cmd import run

    return run(args)


def _accounts(settings: Settings, args: argparse.Namespace) -> int:
    from cli.accounts_cmd import run

    return run(settings, args)


def _audit(settings: Settings, args: argparse.Namespace) -> int:
    from cli.audit_cmd import run

    return run(settings, args)


COMMANDS: dict[str, Callable[[Settings, argparse.Namespace], int]] = {
    "up": _up, "broker": _broker, "actor": _actor, "tap": _tap, "ping": _ping,
    "brokers": _brokers,
    "agent": _agent, "replay": _replay, "workflow": _workflow, "demo": _demo,
    "keys": _keys,
    "queue": _queue,
    "console": _console,
    "audit": _audit,
    "accounts": _accounts,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    settings = settings_or_exit(args.config, data_dir=args.data_dir, curve=args.curve,
                                console_port=args.console_port)
    return COMMANDS[args.command or "up"](settings, args)
