"""Who is at the console: sign-in, sign-out, and the dependencies every route uses.

- ``POST /api/login {account, password}`` opens a server-side session: an HTTP-only,
  SameSite=Strict cookie holding a random value (the database keeps only its hash), valid
  for ``console_session_lifetime_s`` and until the browser closes. Failures are counted
  per account and per client address (console/accounts.py), each attempt before its password
  is checked, and refused with 429 past the limit; a local account, or a person of the
  hospital's directory (console/signin.py). Every sign-in, failure, limit reached,
  sign-out and expiry is an audit record (source ``console``).
- :func:`who` is the person (or script) behind a request, :func:`answerer` one allowed to
  answer a replay: a viewer's resume, pause or cancel is refused here (403
  ``role_forbidden``, recorded), whatever the page shows; the same for work items (an
  operator's cancel of an item, a viewer's retry or skip).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from console import access
from console.account_store import session_hash
from console.accounts import ACT_WORDS, Act, may
from console.signin import session_person, sign_in
from console.state import ApiProblem, ConsoleState
from messages.replay import Role
from runtime.settings import Settings


@dataclass(frozen=True, slots=True)
class Principal:
    """Who makes a request: a signed-in ``account`` (with its session), or the token."""

    role: Role
    via: Literal["session", "token"]
    account: str | None = None
    session: str = ""
    """The session's hash (the trail shows its first characters)."""

    def by(self) -> dict[str, str]:
        """What a control command carries about its sender (messages.replay.ByPerson)."""
        return {"account": self.account, "role": self.role} if self.account else {}


def state_of(request: Request) -> ConsoleState:
    found: ConsoleState = request.app.state.console
    return found


def client_of(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def require_json(request: Request) -> None:
    """A change must come as JSON from this origin: a form or another site cannot send it
    without the browser asking first (and nothing here answers CORS preflights)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ApiProblem(415, "unsupported_media_type",
                         f"send a JSON body (Content-Type: application/json), not {kind!r}")
    require_same_origin(request)


def require_same_origin(request: Request, null_origin: bool = False) -> None:
    """A request a browser says comes from another site (``Origin``, ``Sec-Fetch-Site``) is
    refused. ``null_origin``: a form the browser posts itself says ``Origin: null`` under
    this console's ``Referrer-Policy: no-referrer``; ``Sec-Fetch-Site`` still tells."""
    origin = request.headers.get("origin")
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise ApiProblem(403, "cross_origin", f"requests from a {site} page are not accepted")
    if null_origin and origin == "null":
        return
    if origin and origin.split("://", 1)[-1].lower() != request.headers.get("host", "").lower():
        raise ApiProblem(403, "cross_origin", f"requests from {origin} are not accepted")


def set_session_cookie(response: Response, value: str, settings: Settings,
                       scheme: str) -> None:
    # No Max-Age: the cookie goes when the browser closes (a shared ward computer), and the
    # server's expiry is the one that counts (it can then say "expired", not "who are you").
    response.set_cookie(access.SESSION_COOKIE, value, httponly=True, samesite="strict",
                        path="/", secure=access.cookies_secure(settings, scheme))


def _raise(denied: access.Denied) -> None:
    raise ApiProblem(denied.status, denied.code, denied.message)


async def who(request: Request) -> Principal:
    """The person behind the request (console/access.py's two gates), or an ApiProblem."""
    console = state_of(request)
    token = console.settings.console_token
    denied = access.network_denied(console.network, client_of(request),
                                   request.headers.get("host"))
    if denied is not None:
        _raise(denied)
    auth = request.headers.get("authorization", "")
    bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
    if token and access.token_matches(token, bearer):
        return Principal(role="viewer", via="token")
    cookie = request.cookies.get(access.SESSION_COOKIE)
    if cookie and len(cookie) <= access.MAX_COOKIE_CHARS:
        found = await session_person(console, session_hash(cookie))
        if isinstance(found, access.Denied):
            _raise(found)
            raise AssertionError("unreachable")
        session, role = found
        assert session.account is not None
        return Principal(role=role, via="session", account=session.account.name,
                         session=session.id_hash)
    state = "unknown"
    _raise(access.person_denied(state))
    raise AssertionError("unreachable")


def needs(act: Act) -> object:
    """A dependency: :func:`who`, refused 403 ``role_forbidden`` (and recorded) unless its
    role may ``act``."""

    async def allowed(request: Request, me: Annotated[Principal, Depends(who)]) -> Principal:
        if may(me.role, act):
            return me
        console = state_of(request)
        replay_id = request.path_params.get("replay_id")
        queue = request.path_params.get("queue")
        console.accounts.record("request_refused", time.time(), {
            "account": me.account, "role": me.role, "via": me.via, "act": act,
            "path": request.url.path, "client": client_of(request),
            **({"replay_id": replay_id} if replay_id else {}),
            **({"queue": queue} if queue else {})})
        console.audit.wake()
        what = ACT_WORDS[act]
        whom = f"the account {me.account!r} ({me.role})" if me.account else "the access token"
        raise ApiProblem(403, "role_forbidden", f"{whom} may not {what}",
                         {"role": me.role, "needs": act})

    return Depends(allowed)


Me = Annotated[Principal, Depends(who)]
Answerer = Annotated[Principal, needs("answer")]
ItemHandler = Annotated[Principal, needs("handle_items")]
ItemCanceller = Annotated[Principal, needs("cancel_items")]
Admin = Annotated[Principal, needs("administer")]


class LoginBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=1024)


class Identity(BaseModel):
    account: str | None
    role: Role
    via: Literal["session", "token"]
    expires_at: float | None = None


auth = APIRouter(prefix="/api", tags=["session"])


@auth.post("/login", dependencies=[Depends(require_json)], responses={
    401: {"description": "Wrong account name or password (login_failed)"},
    403: {"description": "The account is disabled, or not from this machine"},
    429: {"description": "Too many failed sign-ins: wait (Retry-After)"}})
async def login(body: LoginBody, request: Request, response: Response) -> Identity:
    """Sign in with an operator account; sets the session cookie."""
    console = state_of(request)
    settings = console.settings
    denied = access.network_denied(console.network, client_of(request),
                                   request.headers.get("host"))
    if denied is not None:
        _raise(denied)
    signed = await sign_in(console, body.account, body.password, client_of(request))
    set_session_cookie(response, signed.cookie, settings, request.url.scheme)
    return Identity(account=signed.account, role=signed.role, via="session",
                    expires_at=signed.expires_at)


@auth.post("/logout", status_code=204, dependencies=[Depends(require_json)])
async def logout(request: Request, response: Response) -> None:
    """Sign out: the session ends on the server, and the cookie is removed."""
    console = state_of(request)
    cookie = request.cookies.get(access.SESSION_COOKIE)
    if cookie and len(cookie) <= access.MAX_COOKIE_CHARS and console.accounts.end_session(
            session_hash(cookie), time.time()):
        console.audit.wake()
    response.delete_cookie(access.SESSION_COOKIE, path="/", httponly=True, samesite="strict")


@auth.get("/openapi.json", include_in_schema=False)
async def openapi(request: Request, _principal: Me) -> JSONResponse:
    """The API's description, for a signed-in person or the token only (it names every
    route and field)."""
    return JSONResponse(request.app.openapi())


@auth.get("/me")
async def me(request: Request, principal: Me) -> Identity:
    """Who this session is."""
    expires = None
    if principal.session:
        found = state_of(request).accounts.session(principal.session, time.time())
        expires = found.expires_at
    return Identity(account=principal.account, role=principal.role, via=principal.via,
                    expires_at=expires)


__all__ = ["Admin", "Answerer", "ItemCanceller", "ItemHandler", "Me", "Principal", "auth",
           "require_json", "who"]
