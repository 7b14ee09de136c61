"""What the console's routes share: the broker link, the live list, the trail reader, the
streams; and how an actor's refusal becomes an HTTP error."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

from console.access import Network, network_of
from console.account_store import AccountStore
from console.accounts import OncePer
from console.audit_pump import AuditPump
from console.board import Board
from console.broker_link import BrokerLink
from console.bus_feed import Hub
from console.directory import Directory
from console.directory_rules import DirectoryConfig
from console.live import Live
from console.metrics import Metrics
from console.tls import certificate_names, tls_on
from console.trail import TrailCache
from console.views import ReplayDetail, pause_view
from runtime.settings import Settings
from transport.client import CallFailed

FIRST_REFRESH_WAIT_S = 3.0

# An actor's error code → the HTTP status the console answers with.
HTTP_STATUS: dict[str, int] = {
    "not_found": 404,
    "screenshot_not_found": 404,
    "not_paused": 409,
    "not_running": 409,
    "required_checks_missing": 400,
    "unknown_check_ids": 400,
    "timeout": 504,
    "forbidden": 403,
    "items_refused": 400,  # a work items file: every refused row in detail.rows
    "no_items": 400,
    "not_allowed": 409,  # a work item's command that does not apply to its state
}


class ApiProblem(Exception):
    """An API error: its status, stable code, message and detail (the JSON body)."""

    def __init__(self, status: int, code: str, message: str,
                 detail: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.detail = detail or {}
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.code, "message": self.message,
                               "detail": self.detail}
        if "missing" in self.detail:
            out["missing"] = self.detail["missing"]  # the origin spec's shape
        return out


def problem_of(exc: CallFailed, service: str) -> ApiProblem:
    message = exc.message
    if exc.code == "timeout":
        message = f"{service} did not answer in time; the request may or may not have applied"
    return ApiProblem(HTTP_STATUS.get(exc.code, 502), exc.code, message, dict(exc.detail))


@dataclass
class ConsoleState:
    settings: Settings
    link: BrokerLink
    board: Board
    hub: Hub
    live: Live
    trail: TrailCache
    accounts: AccountStore
    audit: AuditPump
    limits: OncePer
    metrics: Metrics
    network: Network
    directory: Directory | None
    """The hospital's directory, when sign-in goes through it (console/signin.py)."""

    @classmethod
    def build(cls, settings: Settings) -> ConsoleState:
        # Through the tree's door, as the actors: a process of this host, which a broker of
        # a pair does not count as a peer coming (broker/binary_star.py).
        link = BrokerLink(settings.tree_mdp_endpoints)
        board, hub, trail = Board(), Hub(), TrailCache(link)
        accounts = AccountStore.in_dir(settings.data_dir)
        metrics = Metrics(time.monotonic)
        names = certificate_names(settings.console_tls_cert) if tls_on(settings) else (
            frozenset())
        return cls(settings, link, board, hub,
                   Live(link, board, hub, trail, metrics.on_summaries), trail, accounts,
                   AuditPump(settings.tree_mdp_endpoints, accounts.path), OncePer(), metrics,
                   network_of(settings, names),
                   Directory(config) if (config := DirectoryConfig.of(settings)) else None)

    def close_local(self) -> None:
        """Close what belongs to the event loop's thread (its SQLite connections); then
        ``link.close`` may run elsewhere (it waits for the calls under way)."""
        self.audit.close()
        self.accounts.close()
        if self.directory is not None:
            self.directory.close()

    def close(self) -> None:
        self.close_local()
        self.link.close()

    async def first_refresh(self) -> None:
        """Wait (a little) for the first list from the dispatcher."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.live.ready.wait(), FIRST_REFRESH_WAIT_S)

    async def detail(self, replay_id: str) -> ReplayDetail:
        """A replay now (asked of the dispatcher) and its pause; raises ApiProblem."""
        try:
            (summary,) = await self.live.status(replay_id)
        except CallFailed as exc:
            raise problem_of(exc, "dispatcher") from None
        self.live.apply([summary])
        records = []
        if summary.status == "paused_need_help":
            try:
                records = await self.trail.records(replay_id)
            except CallFailed:
                pass  # the dialog still works from the summary; the detail comes later
        row = self.board.row(replay_id)
        assert row is not None
        return ReplayDetail(replay=row, pause=pause_view(summary, records))
