"""``run.py agent``: run a workstation agent (an MDP worker of ``agent.<machine_id>``)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from agent.link import broker_link as agent_link
from messages.queue import NAME_PATTERN
from runtime.settings import Settings

POOL = re.compile(NAME_PATTERN)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The agent's flags (the endpoint default comes from the settings, at run time)."""
    parser.add_argument("--machine-id", required=True, metavar="M",
                        help="this workstation's id; the agent serves agent.<M>")
    parser.add_argument("--connect", metavar="ENDPOINT",
                        help="the broker's MDP endpoint (default: settings mdp_endpoint, "
                             "tcp://127.0.0.1:5555; curve_endpoint with --curve or --ssh)")
    parser.add_argument("--executor", choices=("simulated", "desktop"), default="simulated",
                        help="simulated: an in-memory desktop; desktop: the real screen")
    parser.add_argument("--data-dir", dest="agent_data_dir", metavar="DIR",
                        help="the agent's ledger directory (default <data_dir>/agent-<M>; "
                             "the global --data-dir goes before 'agent')")
    parser.add_argument("--effects-log", metavar="FILE",
                        help="append one JSON line per input performed (for tests)")
    parser.add_argument("--scenario", metavar="FILE",
                        help="JSON file steering the simulated executor (see "
                             "agent/executors/scenario.py)")
    parser.add_argument("--pool", metavar="POOL",
                        help="the pool of workstations this agent serves: it takes the items "
                             "of that pool's work queues (default LEA_AGENT_POOL, 'default')")
    agent_link.add_arguments(parser)


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Build the agent from ``args`` and serve; 2 on a configuration error."""
    import sys

    from agent.effects import EffectsLog
    from agent.executors import ExecutorUnavailable, ScenarioError, load_scenario, make_executor
    from agent.process import Agent, AgentError
    from agent.status import default_data_dir, log_file
    from runtime.logs import setup_logging

    machine_id: str = args.machine_id
    data_dir = Path(args.agent_data_dir) if args.agent_data_dir else None
    # The log file IT reads after an incident, whatever the console (docs/operations.md).
    setup_logging(f"agent.{machine_id}", settings.log_level,
                  log_file(data_dir or default_data_dir(settings, machine_id)))
    if args.connect:
        settings = settings.model_copy(update={"mdp_endpoint": args.connect})
    if args.pool:
        if not POOL.match(args.pool):
            print(f"error: invalid pool {args.pool!r}: 1-64 letters, digits, '_', '.', '-'",
                  file=sys.stderr)
            return 2
        settings = settings.model_copy(update={"agent_pool": args.pool})
    try:  # an SSH tunnel and/or CURVE (agent/link/broker_link.py): started with the agent
        link = agent_link.build(settings, args, machine_id)
    except agent_link.LinkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(args.scenario) if args.scenario else None
        executor = make_executor(args.executor, scenario)
    except (ScenarioError, ExecutorUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        effects = EffectsLog(args.effects_log, machine_id) if args.effects_log else None
    except OSError as exc:
        print(f"error: cannot open the effects log: {exc}", file=sys.stderr)
        return 2
    try:
        agent = Agent(link.settings, machine_id, executor, data_dir, effects, link.curve)
    except AgentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        link.start()
        return agent.run()
    finally:
        link.stop()
        executor.close()
        if effects is not None:
            effects.close()
