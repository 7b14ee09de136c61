"""The base of every message model, and the registry that maps a type name to its model."""

from __future__ import annotations

import math
from typing import Any, ClassVar, Final

from pydantic import BaseModel, ConfigDict

_REGISTRY: dict[str, type[Message]] = {}


class Message(BaseModel):
    """A message body; a subclass names its wire type: ``class Ping(Message, type_name="ping")``."""

    # defer_build: a model's validator is built when it is first used. Every process imports
    # every model (the codec decodes any type), and building them all was most of the time
    # a tree spends starting, on every process at once.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

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


_SCALARS: Final = frozenset({str, int, bool, type(None)})


def is_plain_json(value: Any) -> bool:
    """Whether ``value`` is plain JSON made of the exact built-in types (dict with str keys,
    list, str, int, bool, None, finite float): what :func:`audit_outbox.sender.plain_json` gives
    back as is, and what a workflow's parameters may hold.

    A walk that builds nothing, much cheaper than the conversion: records read back
    from an outbox (msgpack or JSON) almost always pass it."""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        for k, v in value.items():
            if type(k) is not str or (type(v) not in _SCALARS and not is_plain_json(v)):
                return False
        return True
    if kind is list:
        return all(type(v) in _SCALARS or is_plain_json(v) for v in value)
    return False
