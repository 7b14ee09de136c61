"""The HTML pages: server-rendered with Jinja2, then kept live by /static/*.js through the API.

A page that shows data passes the same rule as the API (console/auth.py): without a session
of an operator account it shows the sign-in page instead. The account and its role are in
the page (``data-account``, ``data-role`` on ``<body>``) for the scripts to show; the API
refuses by itself what the role may not do.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path as FsPath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from console.accounts import may
from console.api import REPLAY_ID
from console.auth import Principal, state_of, who
from console.state import ApiProblem, ConsoleState
from console.view_log import record_view
from console.views import Timeline, timeline_entry
from transport.client import CallFailed

templates = Jinja2Templates(directory=FsPath(__file__).parent / "templates")


def _clock(at: float | None) -> str:
    return datetime.fromtimestamp(at).astimezone().strftime("%H:%M:%S") if at else ""


def _iso(at: float | None) -> str:
    return datetime.fromtimestamp(at).astimezone().isoformat() if at else ""


templates.env.filters["clock"] = _clock
templates.env.filters["iso"] = _iso

pages = APIRouter(include_in_schema=False)
Console = Annotated[ConsoleState, Depends(state_of)]


def _render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context, status_code=status)


ROLE_LABELS = {"viewer": "lecture seule", "operator": "opérateur", "admin": "administrateur"}


def _who(me: Principal) -> dict[str, Any]:
    return {"me": me, "role_label": ROLE_LABELS.get(me.role, me.role),
            "may_answer": may(me.role, "answer")}


async def _gate(request: Request) -> Principal | HTMLResponse:
    """The person at this browser, or the page to show instead (sign-in, refusal)."""
    try:
        return await who(request)
    except ApiProblem as denied:
        if denied.status == 401 or denied.code == "account_disabled":
            return _render(request, "signin.html", 401, why=denied.code)
        return _render(request, "problem.html", denied.status, title="Accès refusé",
                       text=denied.message)


@pages.get("/", response_class=HTMLResponse)
async def replay_list(request: Request, console: Console) -> HTMLResponse:
    if isinstance(me := await _gate(request), HTMLResponse):
        return me
    await console.first_refresh()
    rows = console.board.rows()
    return _render(request, "index.html", **_who(me), rows=rows,
                   waiting=sum(r.status == "paused_need_help" for r in rows),
                   dispatcher=console.live.dispatcher)


@pages.get("/replays/{replay_id}", response_class=HTMLResponse)
async def replay_page(request: Request, console: Console,
                      replay_id: Annotated[str, REPLAY_ID]) -> HTMLResponse:
    if isinstance(me := await _gate(request), HTMLResponse):
        return me
    try:
        detail = await console.detail(replay_id)
    except ApiProblem as problem:
        if problem.status == 404:
            return _render(request, "problem.html", 404, title="Replay introuvable",
                           text=f"Aucun replay « {replay_id} » n'est connu du serveur.")
        return _render(request, "problem.html", problem.status,
                       title="Le serveur de replays ne répond pas",
                       text="Réessayez dans quelques secondes (rechargez la page).")
    try:
        records = await console.trail.records(replay_id)
        timeline = Timeline(replay_id=replay_id, entries=[timeline_entry(r) for r in records],
                            last_seq=records[-1].seq if records else 0)
        trail_ok = True
        record_view(request, me, "timeline", replay_id=replay_id)
    except CallFailed:
        timeline, trail_ok = Timeline(replay_id=replay_id, entries=[], last_seq=0), False
    return _render(request, "replay.html", **_who(me), r=detail.replay, timeline=timeline,
                   trail_ok=trail_ok)


