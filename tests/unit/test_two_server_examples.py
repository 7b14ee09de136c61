"""The two servers' example files (examples/two-servers/, docs/two-servers.md, "Running on two
servers") load, make a pair, and also run side by side on one host: no address, port, data
folder or tree's door of one is the other's."""

from __future__ import annotations

from pathlib import Path

from runtime.settings import Settings, load_settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "two-servers"


def test_the_two_servers_make_a_pair_and_share_nothing_on_one_host() -> None:
    a, b = (load_settings(EXAMPLES / f"server-{x}.toml") for x in "ab")
    assert (a.broker_role, b.broker_role) == ("primary", "backup")
    assert a.mdp_endpoints == tuple(reversed(b.mdp_endpoints))
    assert a.broker_state_endpoint == b.broker_peer_state_endpoint
    assert b.broker_state_endpoint == a.broker_peer_state_endpoint
    assert a.database_url == b.database_url and a.heartbeat_interval_ms == b.heartbeat_interval_ms

    def bound(s: Settings) -> set[str]:
        names = ("mdp_endpoint", "broker_state_endpoint", "bus_in_endpoint",
                 "bus_out_endpoint", "tree_mdp_endpoint")
        return {str(getattr(s, n)) for n in names} | {f"console:{s.console_port}"}

    assert not bound(a) & bound(b), bound(a) & bound(b)
    assert a.data_dir != b.data_dir
