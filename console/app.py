"""The ASGI application: FastAPI (pages, /api/, /api/openapi.json, /static/), with the bus
reader and the refresh loop running for as long as it is served."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from console.api import api
from console.auth import auth
from console.bus_feed import BusFeed
from console.pages import pages, templates
from console.queue_api import queue_api
from console.scrape import poll, scrape
from console.state import ApiProblem, ConsoleState
from console.tls import tls_on
from messages.events import Event
from runtime.settings import Settings

STATIC = Path(__file__).parent / "static"
# Everything is served from here: no other origin, no inline script, no framing.
SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
     b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


# Under the console's own TLS: browsers that came once never try it in clear again.
HSTS = (b"strict-transport-security", b"max-age=31536000")


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` (and ``extra``) to every response (a plain ASGI
    wrapper: it leaves the event stream alone)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]],
                 extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        self.app = app
        self.headers = [*SECURITY_HEADERS, *extra]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *self.headers]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


async def _problem(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiProblem)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _invalid(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = [{"where": ".".join(str(p) for p in e.get("loc", ())), "problem": e.get("msg", "")}
              for e in exc.errors()[:10]]
    if any(e.get("type") == "json_invalid" for e in exc.errors()):
        problem = ApiProblem(400, "invalid_json", "the body is not valid JSON",
                             {"errors": errors})
    else:
        problem = ApiProblem(422, "invalid_request", "; ".join(
            f"{e['where']}: {e['problem']}" for e in errors), {"errors": errors})
    if not _is_api(request):
        return HTMLResponse(templates.get_template("problem.html").render(
            request=request, title="Adresse invalide", text=problem.message), problem.status)
    return JSONResponse(problem.body(), status_code=problem.status)


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if _is_api(request) or exc.status_code != 404:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse({"error": code, "message": str(exc.detail), "detail": {}},
                            status_code=exc.status_code, headers=exc.headers)
    return HTMLResponse(templates.get_template("problem.html").render(
        request=request, title="Page introuvable", text="Cette adresse n'existe pas."), 404)


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        console = ConsoleState.build(settings)
        app.state.console = console
        loop = asyncio.get_running_loop()

        def on_event(event: Event) -> None:
            console.metrics.on_event(event)
            console.live.on_event(event)

        feed = BusFeed(settings.bus_out_endpoint, loop, on_event)
        feed.start()
        tasks = [asyncio.create_task(console.live.run(), name="console-refresh"),
                 asyncio.create_task(console.audit.run(), name="console-audit"),
                 asyncio.create_task(poll(console), name="console-metrics")]
        try:
            yield
        finally:
            console.hub.shutdown()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await loop.run_in_executor(None, feed.stop)
            console.close_local()
            await loop.run_in_executor(None, console.link.close)

    app = FastAPI(title="Léa supervisor console", version="1", lifespan=lifespan,
                  openapi_url=None, docs_url=None, redoc_url=None,
                  description="Follow replays and answer their pauses. Used by the console's "
                              "own pages; scripts may use it with the same rules.")
    app.add_exception_handler(ApiProblem, _problem)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(HTTPException, _http)
    app.include_router(auth)
    app.include_router(api)
    app.include_router(queue_api)
    app.include_router(pages)
    app.include_router(scrape)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(SecurityHeaders, extra=(HSTS,) if tls_on(settings) else ())
    return app
