"""The JSON API under ``/api/`` (described at ``/api/openapi.json``), used by the pages.

Every route but ``POST /api/session`` passes :func:`require_access` (console/access.py).
Errors are ``{"error": code, "message": ..., "detail": {...}}`` with a 4xx/5xx status; a
refusal of the dispatcher keeps its code (``required_checks_missing`` also lists
``missing`` at the top, as spec/01 §6.2 has it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from broker.client import CallFailed
from console import access
from console.state import ApiProblem, ConsoleState, problem_of
from console.views import ReplayDetail, ReplayRow, Timeline, timeline_entry
from messages.audit import GetScreenshot, Screenshot
from messages.replay import (
    CancelReplay,
    ReplayCancelled,
    ReplayResumed,
    ResumeReplay,
)

REPLAY_ID = Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:@-]+$",
                 description="A replay id, as `python run.py replay status` shows it")
SHA256 = Path(pattern=r"^[0-9a-f]{64}$", description="The image's sha256, lowercase hex")
Operator = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                            max_length=128)]
SSE_RETRY_MS = 2000


def state_of(request: Request) -> ConsoleState:
    found: ConsoleState = request.app.state.console
    return found


def require_access(request: Request) -> None:
    """Refuse the call unless console/access.py lets it through."""
    settings = state_of(request).settings
    auth = request.headers.get("authorization", "")
    bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
    denied = access.decide(settings.console_token,
                           request.client.host if request.client else None,
                           request.headers.get("host"), bearer,
                           request.cookies.get(access.SESSION_COOKIE))
    if denied is not None:
        raise ApiProblem(denied.status, denied.code, denied.message)


def require_json(request: Request) -> None:
    """A change must come as JSON from this origin: a form or another site cannot send it
    without the browser asking first (and nothing here answers CORS preflights)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ApiProblem(415, "unsupported_media_type",
                         f"send a JSON body (Content-Type: application/json), not {kind!r}")
    origin = request.headers.get("origin")
    if origin and origin.split("://", 1)[-1].lower() != request.headers.get("host", "").lower():
        raise ApiProblem(403, "cross_origin", f"requests from {origin} are not accepted")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResumeBody(_Body):
    acknowledged_check_ids: list[Annotated[str, StringConstraints(max_length=200)]] = Field(
        default_factory=list, max_length=200,
        description="Every check ticked (every required one must be there)")
    operator: Operator = Field(description="Who answers; recorded in the audit trail")


class CancelBody(_Body):
    operator: Operator


class SessionBody(_Body):
    token: str = Field(max_length=512)


class Resumed(BaseModel):
    status: str = "resumed"
    replay_id: str
    remaining_actions: int


class Cancelled(BaseModel):
    status: str = "cancelled"
    replay_id: str


class ReplayList(BaseModel):
    replays: list[ReplayRow]
    dispatcher: str


class Health(BaseModel):
    status: str
    dispatcher: str
    streams: int


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "Bad input, or a resume refused (e.g. required_checks_missing)"},
    401: {"description": "An access token is needed"},
    403: {"description": "Not from this machine / not this origin"},
    404: {"description": "Unknown replay or image"},
    409: {"description": "Not paused / already finished"},
    504: {"description": "The actor did not answer in time"},
}

public = APIRouter(prefix="/api", tags=["session"])
api = APIRouter(prefix="/api", dependencies=[Depends(require_access)], responses=ERRORS)
Console = Annotated[ConsoleState, Depends(state_of)]


@public.post("/session", status_code=204, dependencies=[Depends(require_json)],
             responses={401: {"description": "Wrong token"}})
def open_session(body: SessionBody, console: Console, response: Response) -> None:
    """Exchange the access token for a session cookie (the page's way in; EventSource cannot
    send an Authorization header). Nothing to do when no token is configured."""
    token = console.settings.console_token
    if not token:
        return
    if not access.token_matches(token, body.token):
        raise ApiProblem(401, "token_invalid", "wrong access token")
    response.set_cookie(access.SESSION_COOKIE, access.session_value(token), max_age=12 * 3600,
                        httponly=True, samesite="strict", path="/")


@api.get("/health")
def health(console: Console) -> Health:
    return Health(status="ok", dispatcher=console.live.dispatcher, streams=console.hub.streams)


@api.get("/replays")
async def list_replays(console: Console) -> ReplayList:
    """Every replay the dispatcher knows, those waiting for a person first."""
    await console.first_refresh()
    return ReplayList(replays=console.board.rows(), dispatcher=console.live.dispatcher)


@api.get("/replays/{replay_id}")
async def get_replay(console: Console, replay_id: Annotated[str, REPLAY_ID]) -> ReplayDetail:
    """One replay, and its pause (what the dialog shows) when it is paused."""
    return await console.detail(replay_id)


@api.get("/replays/{replay_id}/timeline")
async def get_timeline(console: Console, replay_id: Annotated[str, REPLAY_ID],
                       after_seq: Annotated[int, Query(ge=0)] = 0) -> Timeline:
    """The replay's audit records after ``after_seq``, as timeline entries."""
    try:
        records = await console.trail.records(replay_id)
    except CallFailed as exc:
        raise problem_of(exc, "audit_log") from None
    if not records and console.board.summary(replay_id) is None:
        await console.detail(replay_id)  # 404 if the dispatcher does not know it either
    new = [timeline_entry(r) for r in records if r.seq > after_seq]
    return Timeline(replay_id=replay_id, entries=new,
                    last_seq=records[-1].seq if records else after_seq)


@api.post("/replays/{replay_id}/resume", dependencies=[Depends(require_json)])
async def resume(console: Console, replay_id: Annotated[str, REPLAY_ID],
                 body: ResumeBody) -> Resumed:
    """Continue a paused replay. Refused (and the pause kept) unless every required check
    is acknowledged: 400 ``required_checks_missing`` with the ``missing`` ids."""
    msg = ResumeReplay(replay_id=replay_id, operator=body.operator,
                       acknowledged_check_ids=list(dict.fromkeys(body.acknowledged_check_ids)))
    try:
        reply = await console.link.call("dispatcher", msg, timeout_s=5.0, retries=0)
    except CallFailed as exc:
        raise problem_of(exc, "dispatcher") from None
    finally:
        console.live.mark(replay_id)
    if not isinstance(reply, ReplayResumed):
        raise ApiProblem(502, "unexpected_reply", f"dispatcher answered {reply.type_name}")
    return Resumed(replay_id=reply.replay_id, remaining_actions=reply.remaining_actions)


@api.post("/replays/{replay_id}/cancel", dependencies=[Depends(require_json)])
async def cancel(console: Console, replay_id: Annotated[str, REPLAY_ID],
                 body: CancelBody) -> Cancelled:
    """Stop a running or paused replay for good (its remaining steps are dropped)."""
    try:
        reply = await console.link.call("dispatcher", CancelReplay(
            replay_id=replay_id, operator=body.operator), timeout_s=5.0, retries=0)
    except CallFailed as exc:
        raise problem_of(exc, "dispatcher") from None
    finally:
        console.live.mark(replay_id)
    if not isinstance(reply, ReplayCancelled):
        raise ApiProblem(502, "unexpected_reply", f"dispatcher answered {reply.type_name}")
    return Cancelled(status=reply.status, replay_id=reply.replay_id)


@api.get("/screenshots/{sha256}", response_class=Response,
         responses={200: {"content": {"image/png": {}, "image/jpeg": {}}}})
async def screenshot(console: Console, sha256: Annotated[str, SHA256]) -> Response:
    """An image of the audit trail, by hash (content-addressed: cached for good)."""
    try:
        reply = await console.link.call("audit_log", GetScreenshot(sha256=sha256), retries=1)
    except CallFailed as exc:
        raise problem_of(exc, "audit_log") from None
    if not isinstance(reply, Screenshot):
        raise ApiProblem(502, "unexpected_reply", f"audit_log answered {reply.type_name}")
    kind = ("image/png" if reply.data.startswith(b"\x89PNG") else
            "image/jpeg" if reply.data.startswith(b"\xff\xd8\xff") else
            "application/octet-stream")
    return Response(reply.data, media_type=kind, headers={
        "Cache-Control": "private, max-age=31536000, immutable"})


@api.get("/events", response_class=EventSourceResponse)
async def events(console: Console) -> AsyncIterator[ServerSentEvent]:
    """Server-sent events: ``snapshot`` (every row, first), then ``replay`` (a row changed),
    ``event`` (a bus event of a replay), ``status`` (the dispatcher answers or not) and
    ``resync`` (reload everything, then reconnect)."""
    stream = console.hub.open()
    try:
        await console.first_refresh()
        yield ServerSentEvent(event="snapshot", retry=SSE_RETRY_MS, data={
            "replays": [r.model_dump(mode="json") for r in console.board.rows()],
            "dispatcher": console.live.dispatcher})
        while (item := await stream.get()) is not None:
            yield ServerSentEvent(event=item[0], data=item[1])
    finally:
        console.hub.close(stream)


__all__ = ["api", "public"]
