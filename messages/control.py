"""Messages every service understands: liveness (ping) and the error reply."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from messages.base import Message


class Ping(Message, type_name="ping"):
    """Are you there? Answered with :class:`Pong`."""


class Pong(Message, type_name="pong"):
    """The answer to :class:`Ping`."""

    service: str
    pid: int
    started_at: float
    status: str = "ok"


class ErrorReply(Message, type_name="error"):
    """A request could not be served; ``code`` is stable, ``message`` is for people."""

    code: str
    message: str
    detail: dict[str, Any] = Field(default_factory=dict)
