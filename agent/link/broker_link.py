"""How an agent reaches the broker: directly, through its own SSH tunnel, and/or with CURVE.

``run.py agent`` flags (added by :func:`add_arguments`) and the objects they make
(:func:`build`); see agent/link/tunnel.py and agent/link/curve_link.py.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from agent.link.curve_link import CurveKeys, CurveLink
from agent.link.tunnel import (
    HOST_KEY_CHECKS,
    Tunnel,
    TunnelError,
    TunnelSpec,
    free_local_port,
    parse_target,
    parse_tcp_endpoint,
)
from runtime.settings import Settings
from transport.curve_keys import CurveConfigError, KeyLayout


class LinkError(ValueError):
    """Flags that cannot work together, or a key file that cannot be used."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    ssh = parser.add_argument_group("SSH tunnel (the broker stays on its loopback)")
    ssh.add_argument("--ssh", metavar="USER@HOST[:PORT]",
                     help="open and keep an ssh -L tunnel to the broker's host, and speak "
                          "CURVE inside it (implies --curve); --connect (default: the "
                          "settings' curve_endpoint) names the broker as that host sees it")
    ssh.add_argument("--ssh-key", metavar="FILE", help="the private key ssh logs in with")
    ssh.add_argument("--ssh-known-hosts", metavar="FILE",
                     help="known_hosts file holding the server's host key")
    ssh.add_argument("--ssh-host-key-check", choices=HOST_KEY_CHECKS,
                     help="StrictHostKeyChecking (default: ssh's configuration; in batch mode "
                          "an unknown host is refused)")
    ssh.add_argument("--ssh-local-port", type=int, default=0, metavar="PORT",
                     help="local end of the tunnel (default: a free port)")
    ssh.add_argument("--ssh-option", action="append", default=[], metavar="OPTION",
                     help="extra ssh -o option, e.g. ProxyJump=bastion (repeatable)")
    curve = parser.add_argument_group("CURVE (the broker exposed with --curve)")
    # SUPPRESS: under `run.py`, the global --curve must not be reset by this one's default.
    curve.add_argument("--curve", action="store_true", default=argparse.SUPPRESS,
                       help="encrypt and authenticate with CURVE (also LEA_CURVE=1); connects "
                            "to curve_endpoint unless --connect")
    curve.add_argument("--server-key", metavar="FILE",
                       help="the broker's public key (default <keys_dir>/server.key)")
    curve.add_argument("--agent-key", metavar="FILE",
                       help="this agent's secret key file (default "
                            "<keys_dir>/agents/<machine-id>.key_secret)")
    curve.add_argument("--exit-on-auth-failure", action="store_true",
                       help="exit with status 3 when the broker refuses the key, instead of "
                            "retrying with backoff")


@dataclass
class Link:
    """The settings the agent must use (its endpoint), and what to start and stop."""

    settings: Settings
    curve: CurveLink | None = None
    tunnel: Tunnel | None = None

    def start(self) -> None:
        if self.tunnel is not None:
            self.tunnel.start()

    def stop(self) -> None:
        if self.tunnel is not None:
            self.tunnel.stop()


def build(settings: Settings, args: argparse.Namespace, machine_id: str) -> Link:
    """The link ``args`` ask for; raises LinkError with a message for the operator."""
    # Through SSH too, the agent proves who it is with its own key: the tunnel reaches the
    # broker's CURVE listener, never the plain loopback endpoint (broker/tree_door.py).
    use_curve = settings.curve or bool(getattr(args, "curve", False)) or bool(args.ssh)
    endpoint = args.connect or (settings.curve_endpoint if use_curve
                                else settings.mdp_endpoint)
    tunnel: Tunnel | None = None
    if args.ssh and settings.mdp_backup_endpoint:
        raise LinkError("--ssh reaches one broker: it cannot be used with a broker pair "
                        "(LEA_MDP_BACKUP_ENDPOINT); use CURVE")
    if args.ssh:
        try:
            host, port = parse_tcp_endpoint(endpoint)
            if not 0 <= args.ssh_local_port < 65536:
                raise TunnelError(f"--ssh-local-port {args.ssh_local_port}: not a port")
            if args.ssh_key and not Path(args.ssh_key).is_file():
                raise TunnelError(f"--ssh-key {args.ssh_key}: no such file")
            spec = TunnelSpec(
                target=parse_target(args.ssh), local_port=args.ssh_local_port or free_local_port(),
                remote_host=host, remote_port=port,
                key_file=Path(args.ssh_key) if args.ssh_key else None,
                known_hosts=Path(args.ssh_known_hosts) if args.ssh_known_hosts else None,
                host_key_check=args.ssh_host_key_check, options=tuple(args.ssh_option))
            tunnel = Tunnel(spec)
        except TunnelError as exc:
            raise LinkError(str(exc)) from exc
    curve: CurveLink | None = None
    if use_curve:
        layout = KeyLayout(settings.keys_path)
        agent_key = Path(args.agent_key) if args.agent_key else layout.agent_secret(machine_id)
        server_key = Path(args.server_key) if args.server_key else layout.server_public
        try:
            keys = CurveKeys.load(server_key, agent_key)
        except CurveConfigError as exc:
            raise LinkError(f"{exc} (make keys with: python run.py keys generate --agent "
                            f"{machine_id})") from exc
        curve = CurveLink(keys, endpoint, agent_key, args.exit_on_auth_failure)
    if tunnel is not None:
        endpoint = tunnel.spec.local_endpoint  # the CURVE link's messages name the broker's
    return Link(settings.model_copy(update={"mdp_endpoint": endpoint}), curve, tunnel)
