"""The JSON API under ``/api/`` (described at ``/api/openapi.json``), used by the pages.

Every route passes :func:`console.auth.who` (a signed-in account, or the token to read);
resume, pause and cancel need a role that may answer (console/accounts.py), and the
dispatcher gets the account as ``operator`` with its role: the name is never taken from the
body. Errors are ``{"error": code, "message": ..., "detail": {...}}`` with a 4xx/5xx status;
a refusal of the dispatcher keeps its code (``required_checks_missing`` also lists
``missing`` at the top, as the origin spec has it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from console.access import Denied
from console.auth import Admin, Answerer, Me, require_json, state_of, who
from console.signin import session_person
from console.state import ApiProblem, ConsoleState, problem_of
from console.view_log import record_view
from console.views import ReplayDetail, ReplayRow, Timeline, timeline_entry
from messages.audit import GetScreenshot, Screenshot
from messages.base import Message
from messages.replay import (
    Ack,
    CancelReplay,
    PauseReplay,
    ReplayCancelled,
    ReplayResumed,
    ResumeReplay,
    Role,
)
from transport.client import CallFailed

REPLAY_ID = Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:@-]+$",
                 description="A replay id, as `python run.py replay status` shows it")
SHA256 = Path(pattern=r"^[0-9a-f]{64}$", description="The image's sha256, lowercase hex")
SSE_RETRY_MS = 2000
SESSION_CHECK_S = 5.0
"""An open event stream looks at its session at least this often (and at every event)."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResumeBody(_Body):
    acknowledged_check_ids: list[Annotated[str, StringConstraints(max_length=200)]] = Field(
        default_factory=list, max_length=200,
        description="Every check ticked (every required one must be there)")
    step: Literal["done", "redo"] | None = Field(
        None, description="At a pause a failed step caused: done (go on) or redo (Léa "
                          "does it again); unset: done when its input may have gone out")


class CancelBody(_Body):
    pass


class PauseBody(_Body):
    message: str | None = Field(None, max_length=2000,
                                description="Shown to the supervisor (default: who paused)")


class Resumed(BaseModel):
    status: str = "resumed"
    replay_id: str
    remaining_actions: int


class Cancelled(BaseModel):
    status: str = "cancelled"
    replay_id: str


class Paused(BaseModel):
    status: str = "paused"
    replay_id: str
    inflight_action_id: str | None = None


class AccountRow(BaseModel):
    name: str
    role: Role
    disabled: bool
    created_at: float


class AccountList(BaseModel):
    accounts: list[AccountRow]


class ReplayList(BaseModel):
    replays: list[ReplayRow]
    dispatcher: str


class Health(BaseModel):
    status: str
    dispatcher: str
    streams: int


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "Bad input, or a resume refused (e.g. required_checks_missing)"},
    401: {"description": "Sign in first (login_required), or again (session_expired)"},
    403: {"description": "Not from this machine / not this origin / role_forbidden"},
    404: {"description": "Unknown replay or image"},
    409: {"description": "Not paused / already finished"},
    504: {"description": "The actor did not answer in time"},
}

api = APIRouter(prefix="/api", dependencies=[Depends(who)], responses=ERRORS)
Console = Annotated[ConsoleState, Depends(state_of)]


@api.get("/health")
def health(console: Console) -> Health:
    return Health(status="ok", dispatcher=console.live.dispatcher, streams=console.hub.streams)


@api.get("/replays")
async def list_replays(console: Console) -> ReplayList:
    """Every replay the dispatcher knows, those waiting for a person first."""
    await console.first_refresh()
    return ReplayList(replays=console.board.rows(), dispatcher=console.live.dispatcher)


@api.get("/replays/{replay_id}")
async def get_replay(console: Console, request: Request, me: Me,
                     replay_id: Annotated[str, REPLAY_ID]) -> ReplayDetail:
    """One replay, and its pause (what the dialog shows) when it is paused. The view is
    recorded in the audit trail (console/view_log.py)."""
    detail = await console.detail(replay_id)
    record_view(request, me, "replay", replay_id=replay_id)
    return detail


@api.get("/replays/{replay_id}/timeline")
async def get_timeline(console: Console, request: Request, me: Me,
                       replay_id: Annotated[str, REPLAY_ID],
                       after_seq: Annotated[int, Query(ge=0)] = 0) -> Timeline:
    """The replay's audit records after ``after_seq``, as timeline entries. The view is
    recorded in the audit trail (console/view_log.py)."""
    try:
        records = await console.trail.records(replay_id)
    except CallFailed as exc:
        raise problem_of(exc, "audit_log") from None
    if not records and console.board.summary(replay_id) is None:
        await console.detail(replay_id)  # 404 if the dispatcher does not know it either
    new = [timeline_entry(r) for r in records if r.seq > after_seq]
    record_view(request, me, "timeline", replay_id=replay_id)
    return Timeline(replay_id=replay_id, entries=new,
                    last_seq=records[-1].seq if records else after_seq)


R = TypeVar("R", bound=Message)


async def _control(console: ConsoleState, msg: ResumeReplay | CancelReplay | PauseReplay,
                   expected: type[R]) -> R:
    """Send a control command to the dispatcher; its reply, or the refusal as an ApiProblem."""
    try:
        reply = await console.link.call("dispatcher", msg, timeout_s=5.0, retries=0)
    except CallFailed as exc:
        raise problem_of(exc, "dispatcher") from None
    finally:
        console.live.mark(msg.replay_id)
    if not isinstance(reply, expected):
        raise ApiProblem(502, "unexpected_reply", f"dispatcher answered {reply.type_name}")
    return reply


@api.post("/replays/{replay_id}/resume", dependencies=[Depends(require_json)])
async def resume(console: Console, replay_id: Annotated[str, REPLAY_ID],
                 body: ResumeBody, me: Answerer) -> Resumed:
    """Continue a paused replay, in the name of the signed-in account. Refused (and the
    pause kept) unless every required check is acknowledged: 400 ``required_checks_missing``
    with the ``missing`` ids."""
    reply = await _control(console, ResumeReplay(
        replay_id=replay_id, operator=me.account, **me.by(), step=body.step,
        acknowledged_check_ids=list(dict.fromkeys(body.acknowledged_check_ids))),
        ReplayResumed)
    return Resumed(replay_id=reply.replay_id, remaining_actions=reply.remaining_actions)


@api.post("/replays/{replay_id}/cancel", dependencies=[Depends(require_json)])
async def cancel(console: Console, replay_id: Annotated[str, REPLAY_ID],
                 _body: CancelBody, me: Answerer) -> Cancelled:
    """Stop a running or paused replay for good (its remaining steps are dropped)."""
    reply = await _control(console, CancelReplay(
        replay_id=replay_id, operator=me.account, **me.by()), ReplayCancelled)
    return Cancelled(status=reply.status, replay_id=reply.replay_id)


@api.post("/replays/{replay_id}/pause", dependencies=[Depends(require_json)])
async def pause(console: Console, replay_id: Annotated[str, REPLAY_ID], body: PauseBody,
                me: Answerer) -> Paused:
    """Pause a running replay before its next step (the step in flight finishes)."""
    reply = await _control(console, PauseReplay(
        replay_id=replay_id, operator=me.account, message=body.message, **me.by()), Ack)
    inflight = reply.detail.get("inflight_action_id")
    return Paused(replay_id=replay_id,
                  inflight_action_id=inflight if isinstance(inflight, str) else None)


@api.get("/accounts")
def list_accounts(console: Console, _me: Admin) -> AccountList:
    """The operator accounts (admin only; they are managed with ``run.py accounts``)."""
    return AccountList(accounts=[
        AccountRow(name=a.name, role=a.role, disabled=a.disabled, created_at=a.created_at)
        for a in console.accounts.accounts()])


@api.get("/screenshots/{sha256}", response_class=Response,
         responses={200: {"content": {"image/png": {}, "image/jpeg": {}}}})
async def screenshot(console: Console, request: Request, me: Me,
                     sha256: Annotated[str, SHA256]) -> Response:
    """An image of the audit trail, by hash (content-addressed: cached for good, in this
    browser only). The view is recorded in the audit trail (console/view_log.py)."""
    try:
        reply = await console.link.call("audit_log", GetScreenshot(sha256=sha256), retries=1)
    except CallFailed as exc:
        raise problem_of(exc, "audit_log") from None
    if not isinstance(reply, Screenshot):
        raise ApiProblem(502, "unexpected_reply", f"audit_log answered {reply.type_name}")
    record_view(request, me, "screenshot", sha256=sha256)
    kind = ("image/png" if reply.data.startswith(b"\x89PNG") else
            "image/jpeg" if reply.data.startswith(b"\xff\xd8\xff") else
            "application/octet-stream")
    return Response(reply.data, media_type=kind, headers={
        "Cache-Control": "private, max-age=31536000, immutable"})


@api.get("/events", response_class=EventSourceResponse)
async def events(console: Console, me: Me) -> AsyncIterator[ServerSentEvent]:
    """Server-sent events: ``snapshot`` (every row, first), then ``replay`` (a row changed),
    ``event`` (a bus event of a replay), ``status`` (the dispatcher answers or not),
    ``resync`` (reload everything, then reconnect) and ``session_ended`` (the session
    expired, was closed or its account disabled: the stream ends; sign in again)."""
    stream = console.hub.open()
    try:
        await console.first_refresh()
        yield ServerSentEvent(event="snapshot", retry=SSE_RETRY_MS, data={
            "replays": [r.model_dump(mode="json") for r in console.board.rows()],
            "dispatcher": console.live.dispatcher})
        checked = time.monotonic()
        while True:
            try:
                item = await asyncio.wait_for(stream.get(), SESSION_CHECK_S)
            except TimeoutError:
                item = ("", {})
            if me.session and time.monotonic() - checked >= SESSION_CHECK_S:
                checked = time.monotonic()
                # The same look as at each request: a directory person removed from its
                # groups loses the stream too (console/signin.py).
                found = await session_person(console, me.session)
                if isinstance(found, Denied):
                    yield ServerSentEvent(event="session_ended", data={"state": found.code})
                    return
            if item is None:
                return
            if item[0]:
                yield ServerSentEvent(event=item[0], data=item[1])
    finally:
        console.hub.close(stream)


__all__ = ["api"]
