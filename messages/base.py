"""The base of every message model, and the registry that maps a type name to its model."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

_REGISTRY: dict[str, type[Message]] = {}


class Message(BaseModel):
    """A message body; a subclass names its wire type: ``class Ping(Message, type_name="ping")``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type_name: ClassVar[str] = ""

    def __init_subclass__(cls, type_name: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not type_name:
            return
        if type_name in _REGISTRY and _REGISTRY[type_name] is not cls:
            raise TypeError(f"message type {type_name!r} is already registered")
        cls.type_name = type_name
        _REGISTRY[type_name] = cls


def model_for(type_name: str) -> type[Message] | None:
    """The model registered under ``type_name``, or None."""
    return _REGISTRY.get(type_name)


def registered_types() -> list[str]:
    """Every registered wire type name, sorted."""
    return sorted(_REGISTRY)
