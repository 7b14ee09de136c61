"""The local Ollama server as an :class:`~actors.safety_checks.llm.LlmClient`.

Built on the official ``ollama`` client (its async flavour): ``asyncio.wait_for`` bounds the
whole call, so a server that answers slowly, or trickles its answer byte by byte, is cut at
the deadline. A socket timeout (what ``requests`` or httpx offer) bounds each read only.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from actors.safety_checks.llm import LlmFailure, LlmQuery, LlmReply

if TYPE_CHECKING:
    import httpx
    import ollama

# Low temperature: the same screen should give the same checklist. Room for 3 checks in JSON.
OPTIONS: dict[str, Any] = {"temperature": 0.1, "num_predict": 512}


class OllamaClient:
    """``POST {url}/api/generate`` with ``stream: false``, ``format`` = the answer's schema."""

    def __init__(self, url: str) -> None:
        self._url = url.rstrip("/")

    @property
    def url(self) -> str:
        return self._url

    def generate(self, query: LlmQuery) -> LlmReply:
        """Blocks up to ``query.timeout_s``; call it from a worker thread, not an event loop."""
        # Imported at the first query, not at start: the client library costs more CPU to
        # import than the rest of the actor, and a tree starts every actor at once.
        global httpx, ollama
        import httpx
        import ollama

        started = time.monotonic()

        def elapsed_ms() -> float:
            return (time.monotonic() - started) * 1000.0

        try:
            raw = asyncio.run(asyncio.wait_for(self._generate(query), query.timeout_s))
        except TimeoutError:
            raise LlmFailure("timeout", f"no complete answer within {query.timeout_s:.1f} s",
                             elapsed_ms()) from None
        except LlmFailure as failure:
            failure.latency_ms = elapsed_ms()
            raise
        except Exception as exc:  # the library may raise more than it documents
            raise LlmFailure("client_error", f"{type(exc).__name__}: {exc}"[:500],
                             elapsed_ms()) from None
        return LlmReply(raw=raw, latency_ms=elapsed_ms())

    async def _generate(self, query: LlmQuery) -> str:
        # trust_env=False: a proxy from the environment must never see patient screens.
        client = ollama.AsyncClient(host=self._url, timeout=httpx.Timeout(query.timeout_s),
                                    trust_env=False)
        async with client:
            try:
                reply = await client.generate(
                    model=query.model, prompt=query.prompt, format=query.schema,
                    images=list(query.images) or None, options=OPTIONS, stream=False)
            except ollama.ResponseError as exc:
                raise LlmFailure("http_error", f"HTTP {exc.status_code}: {exc.error}"[:500]
                                 ) from None
            except ConnectionError as exc:  # ollama's wrapper of httpx.ConnectError
                raise LlmFailure("unreachable", f"{self._url}: {exc}"[:500]) from None
            except httpx.TimeoutException:
                raise TimeoutError from None
            except httpx.TransportError as exc:
                raise LlmFailure("unreachable", f"{type(exc).__name__}: {exc}"[:500]
                                 ) from None
            except (json.JSONDecodeError, ValidationError, TypeError) as exc:
                raise LlmFailure("invalid_response",
                                 f"not an Ollama reply: {type(exc).__name__}: {exc}"[:500]
                                 ) from None
        if not isinstance(reply.response, str):
            raise LlmFailure("invalid_response", "the reply has no 'response' text")
        return reply.response
