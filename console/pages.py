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
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from console import access
from console.accounts import may
from console.api import REPLAY_ID
from console.auth import (
    Principal,
    client_of,
    require_same_origin,
    set_session_cookie,
    state_of,
    who,
)
from console.queue_api import QUEUE, queue_items, queue_list
from console.queue_views import ITEM_STATE
from console.signin import sign_in
from console.state import ApiProblem, ConsoleState
from console.view_log import record_view
from console.views import Timeline, timeline_entry
from transport.client import CallFailed

templates = Jinja2Templates(directory=FsPath(__file__).parent / "templates")


def _clock(at: float | None) -> str:
    return datetime.fromtimestamp(at).astimezone().strftime("%H:%M:%S") if at else ""


def _iso(at: float | None) -> str:
    return datetime.fromtimestamp(at).astimezone().isoformat() if at else ""


def _when(at: float | None) -> str:
    return datetime.fromtimestamp(at).astimezone().strftime("%d/%m/%Y %H:%M:%S") if at else ""


templates.env.filters["clock"] = _clock
templates.env.filters["when"] = _when
templates.env.filters["iso"] = _iso

pages = APIRouter(include_in_schema=False)
Console = Annotated[ConsoleState, Depends(state_of)]


def _render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context, status_code=status)


ROLE_LABELS = {"viewer": "lecture seule", "operator": "opérateur", "admin": "administrateur"}


def _who(me: Principal) -> dict[str, Any]:
    return {"me": me, "role_label": ROLE_LABELS.get(me.role, me.role),
            "may_answer": may(me.role, "answer"),
            "may_handle_items": may(me.role, "handle_items"),
            "may_cancel_items": may(me.role, "cancel_items")}


DEFAULT_CONTACT = "l'administrateur de Léa de votre établissement"
# What the sign-in page says after a refusal (the same codes as the API's, console/signin.py).
SIGNIN_PROBLEMS = {
    "login_failed": "Identifiant ou mot de passe incorrect.",
    "account_disabled": "Ce compte est désactivé. Adressez-vous à {contact}.",
    "no_role": ("Votre compte n'a pas accès à Léa : il n'est dans aucun de ses groupes de "
                "l'annuaire. Adressez-vous à {contact}."),
    "directory_unavailable": "L'annuaire de l'hôpital ne répond pas : réessayez dans un moment.",
    "cross_origin": "Cette page de connexion ne vient pas de Léa : ouvrez Léa à son adresse.",
}
SIGNIN_FORM_MAX_BYTES = 8192


def _local(path: str) -> str:
    """``path`` if it is a page of this console, else ``/``: no redirection elsewhere."""
    if path.startswith("/") and not path.startswith(("//", "/signin")) and "\\" not in path:
        return path
    return "/"


def _signin(request: Request, status: int, why: str | None = None,
            problem: str | None = None, account: str = "",
            next_page: str | None = None) -> HTMLResponse:
    """The sign-in page: whom to ask for an account (never a server command), and why the
    person is here again when there is a reason."""
    settings = state_of(request).settings
    contact = settings.console_help_contact or DEFAULT_CONTACT
    return _render(request, "signin.html", status, why=why, contact=contact,
                   directory=bool(settings.console_ldap_url), account=account,
                   problem=problem.format(contact=contact) if problem else None,
                   next=_local(next_page or request.url.path))


async def _gate(request: Request) -> Principal | HTMLResponse:
    """The person at this browser, or the page to show instead (sign-in, refusal)."""
    try:
        return await who(request)
    except ApiProblem as denied:
        if denied.status == 401 or denied.code in ("account_disabled", "no_role"):
            return _signin(request, 401 if denied.status == 401 else denied.status,
                           why=denied.code, problem=SIGNIN_PROBLEMS.get(denied.code))
        return _render(request, "problem.html", denied.status, title="Accès refusé",
                       text=denied.message)


@pages.get("/signin")
async def signin_again() -> RedirectResponse:
    """After a sign-in page answered at /signin, a reload comes here: the list (which asks
    for a sign-in itself when needed)."""
    return RedirectResponse("/", status_code=303)


@pages.post("/signin", response_class=HTMLResponse)
async def signin_form(request: Request, console: Console) -> Response:
    """The sign-in form sent by the browser itself (its script not loaded): a POST, so the
    password never is in an address; then back to the page asked for."""
    name, form = "", dict[str, list[str]]()
    try:
        require_same_origin(request, null_origin=True)
        denied = access.network_denied(console.network, client_of(request),
                                       request.headers.get("host"))
        if denied is not None:
            raise ApiProblem(denied.status, denied.code, denied.message)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > SIGNIN_FORM_MAX_BYTES:
                raise ApiProblem(413, "too_large", "the form is too large")
        form = parse_qs(body.decode("utf-8", "replace"), max_num_fields=10)
        name = (form.get("account") or [""])[0][:64]
        password = (form.get("password") or [""])[0][:1024]
        if not name.strip() or not password:
            raise ApiProblem(401, "login_failed", "account and password are both needed")
        signed = await sign_in(console, name, password, client_of(request))
    except ApiProblem as problem:
        text = SIGNIN_PROBLEMS.get(problem.code)
        if problem.code == "login_rate_limited":
            minutes = max(1, -(-int(problem.detail.get("retry_after_s", 60)) // 60))
            text = f"Trop d'essais manqués : réessayez dans {minutes} min."
        page = _signin(request, problem.status, problem=text or problem.message,
                       account=name, next_page=(form.get("next") or ["/"])[0])
        page.headers.update(problem.headers)
        return page
    response = RedirectResponse(_local((form.get("next") or ["/"])[0]), status_code=303)
    set_session_cookie(response, signed.cookie, console.settings, request.url.scheme)
    return response


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




def _dispatcher_silent(request: Request, problem: ApiProblem) -> HTMLResponse:
    return _render(request, "problem.html", problem.status,
                   title="Le serveur de replays ne répond pas",
                   text="Réessayez dans quelques secondes (rechargez la page).")


@pages.get("/queues", response_class=HTMLResponse)
async def queues_page(request: Request, console: Console) -> HTMLResponse:
    """The work queues: items counted by state, the agents by pool (docs/queues.md)."""
    if isinstance(me := await _gate(request), HTMLResponse):
        return me
    try:
        listed = await queue_list(console)
    except ApiProblem as problem:
        return _dispatcher_silent(request, problem)
    return _render(request, "queues.html", **_who(me), listed=listed,
                   item_states=ITEM_STATE)


@pages.get("/queues/{queue}", response_class=HTMLResponse)
async def queue_page(request: Request, console: Console,
                     queue: Annotated[str, QUEUE]) -> HTMLResponse:
    """One queue: its items (no values until one is opened), adding a file, the commands
    the person's role allows."""
    if isinstance(me := await _gate(request), HTMLResponse):
        return me
    try:
        shown = await queue_items(console, queue, [])
    except ApiProblem as problem:
        if problem.status == 404:
            return _render(request, "problem.html", 404, title="File introuvable",
                           text=f"Aucune file de travail « {queue} » n'est connue du serveur.")
        return _dispatcher_silent(request, problem)
    return _render(request, "queue.html", **_who(me), q=shown.queue, items=shown.items,
                   matching=shown.matching, item_states=ITEM_STATE)
