"""Generated inputs for the fuzz tests: hypothesis strategies derived from the message models.

``body_of(model)`` walks a pydantic model's fields (annotation and constraints: lengths,
bounds, patterns, literals, unions, nested models) and draws bodies that mostly validate, so
that handlers are reached with real inputs, not only refused at the door. (hypothesis-
jsonschema on the models' JSON schemas was tried first: 40-150 ms per example for the
workflow-carrying types, too slow for 100,000 inputs.)

- :func:`structured`: envelopes of every registered type with a drawn body; some of them
  mutated (a field of the wrong type, a required one dropped, an unknown one added, the
  body of another type, a bad version or id) so that they must be refused.
- :func:`unstructured`: random bytes, random msgpack values, truncated envelopes, the wrong
  number of frames.
- :class:`Pools`: ids seen in earlier requests and replies (replay, action, attempt ids...)
  that later draws reuse, so that a fuzzed dispatcher is asked about replays it has.
"""

from __future__ import annotations

import re
import types
import typing
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgpack
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from messages.base import Message, model_for, registered_types
from messages.codec import encode
from messages.safety_checks import BuildPausePayload
from messages.workflow import ACTION_ID, Action

MAX_TEXT = 24  # longer strings only cost time: length limits are drawn as edge cases
MAX_LIST = 3
HINTED = ("replay_id", "session_id", "machine_id", "action_id", "attempt_id", "base_action_id",
          "record_id", "sha256")
"""String fields drawn, most of the time, from ids already seen (:class:`Pools`)."""

Json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
    | st.binary(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=8)
"""Any value msgpack can carry."""


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, each drawn about ``weight`` times in ``sum(weights)``.
    (``st.one_of`` flattens nested one_ofs: its branches do not keep the weights meant.)"""
    table = [i for i, (weight, _) in enumerate(choices) for _ in range(weight)]
    return st.sampled_from(table).flatmap(lambda i: choices[i][1])


@dataclass
class Pools:
    """Recently seen values of the :data:`HINTED` fields (the newest ``size`` of each), and
    ``pinned`` ones that stay (the machine id of the agent under fuzz)."""

    size: int = 16
    seen: dict[str, deque[str]] = field(default_factory=dict)
    pinned: dict[str, list[str]] = field(default_factory=dict)

    def add(self, name: str, value: str) -> None:
        pool = self.seen.setdefault(name, deque(maxlen=self.size))
        if value not in pool:
            pool.append(value)

    def learn(self, obj: Any) -> None:
        """Remember every hinted id inside a message or a dumped structure."""
        if isinstance(obj, BaseModel):
            obj = obj.model_dump(mode="python")
        if isinstance(obj, dict):
            for key, value in obj.items():
                if key in HINTED and isinstance(value, str) and len(value) <= 200:
                    self.add(key, value)
                    if key == "action_id":  # a step's retry and resume ids come from it
                        self.add("base_action_id", value)
                else:
                    self.learn(value)
        elif isinstance(obj, list | tuple):
            for item in obj:
                self.learn(item)

    def pick(self, name: str, otherwise: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        """A seen value of ``name``, else one of ``otherwise``. The draws are the same
        whatever the pools hold (an index and a fallback): hypothesis requires it."""
        return st.tuples(st.integers(0, self.size - 1), otherwise).map(
            lambda drawn: self._nth(name, *drawn))

    def _nth(self, name: str, i: int, otherwise: str) -> str:
        related = "action_id" if name.endswith("action_id") else name  # base_action_id...
        pool = [*self.pinned.get(name, []), *(self.seen.get(name) or self.seen.get(related)
                                              or [])]
        return pool[i % len(pool)] if pool else otherwise


# Deriving a strategy from a model -------------------------------------------------------------

def _bounds(metadata: Iterable[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in metadata:
        for name in ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern", "strict"):
            value = getattr(m, name, None)
            if value is not None:
                out[name] = value
    return out


def _text(b: dict[str, Any]) -> st.SearchStrategy[str]:
    lo = int(b.get("min_length", 0))
    hi = int(b.get("max_length", MAX_TEXT))
    if "pattern" in b:
        pattern = re.compile(b["pattern"])
        return st.from_regex(pattern, fullmatch=True).filter(lambda s: lo <= len(s) <= hi)
    short = st.text(min_size=lo, max_size=max(lo, min(hi, MAX_TEXT)))
    if MAX_TEXT < hi <= 100_000:  # now and then the limit itself, seldom one past it
        edge = st.sampled_from(["x" * hi, "x" * hi, "x" * hi, "x" * (hi + 1)])
        return weighted((4, short), (1, edge))
    return short


def _int(b: dict[str, Any]) -> st.SearchStrategy[int]:
    lo = b.get("ge", b["gt"] + 1 if "gt" in b else -(2**63))
    hi = b.get("le", b["lt"] - 1 if "lt" in b else 2**63 - 1)
    return st.integers(int(lo), int(hi))


def _float(b: dict[str, Any]) -> st.SearchStrategy[float]:
    lo = b.get("ge", b.get("gt"))
    hi = b.get("le", b.get("lt"))
    if lo is None and hi is None:
        return st.floats(allow_nan=True, allow_infinity=True)
    return st.floats(min_value=lo, max_value=hi, exclude_min="gt" in b, exclude_max="lt" in b)


class Deriver:
    """Strategies for models and annotations, ids drawn from ``pools``."""

    def __init__(self, pools: Pools | None = None) -> None:
        self.pools = pools or Pools()
        self._models: dict[type[BaseModel], st.SearchStrategy[dict[str, Any]]] = {}

    def model(self, model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
        """Dicts that (mostly) validate as ``model``: required fields, some optional ones."""
        if model not in self._models:
            self._models[model] = st.deferred(lambda: self._build(model))
        return self._models[model]

    def _build(self, model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
        derived = self._fields(model)
        refine = REFINE.get(model)
        return derived if refine is None else weighted((1, derived), (4, refine(self, derived)))

    def _fields(self, model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
        required: dict[str, st.SearchStrategy[Any]] = {}
        optional: dict[str, st.SearchStrategy[Any]] = {}
        for name, info in model.model_fields.items():
            key = info.alias or name
            strategy = self.field(name, info)
            (required if info.is_required() else optional)[key] = strategy
        return st.fixed_dictionaries(required, optional=optional)

    def field(self, name: str, info: FieldInfo) -> st.SearchStrategy[Any]:
        strategy = self.annotation(info.annotation, _bounds(info.metadata))
        if name in HINTED:
            strategy = weighted((1, strategy), (2, self.pools.pick(name, strategy)))
        return strategy

    def annotation(self, tp: Any, b: dict[str, Any]) -> st.SearchStrategy[Any]:
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is typing.Annotated:
            return self.annotation(args[0], {**b, **_bounds(args[1:])})
        if origin in (typing.Union, types.UnionType):
            return st.one_of(*(st.none() if a is type(None) else self.annotation(a, b)
                               for a in args))
        if origin is typing.Literal:
            return st.sampled_from(args)
        if origin in (list, tuple, set, frozenset):
            items = self.annotation(args[0], {}) if args else Json
            lo = int(b.get("min_length", 0))
            return st.lists(items, min_size=lo, max_size=max(lo, min(int(b.get(
                "max_length", MAX_LIST)), MAX_LIST)))
        if origin is dict:
            values = self.annotation(args[1], {}) if len(args) == 2 else Json
            return st.dictionaries(st.text(max_size=8), values, max_size=MAX_LIST)
        if tp is typing.Any or tp is object:
            return Json
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return self.model(tp)
        if tp is bool:
            return st.booleans()
        if tp is int:
            return _int(b)
        if tp is float:
            return _float(b)
        if tp is str:
            return _text(b)
        if tp is bytes:
            return st.binary(max_size=64) | st.sampled_from([_PNG])
        if tp is type(None):
            return st.none()
        raise TypeError(f"no strategy for {tp!r}")


# Hand-written where a model's validators tie fields together (most drawn bodies would be
# refused, and the handler never reached): an action's parameters depend on its type, and
# safety_checks builds payloads for pause_for_human actions only.

_KEYS = st.lists(st.sampled_from(["ctrl", "alt", "shift", "a", "enter", "tab", "f4"]),
                 min_size=1, max_size=3)
_CHECK = st.fixed_dictionaries({
    "id": st.from_regex(ACTION_ID, fullmatch=True), "label": st.text(min_size=1, max_size=30),
    "required": st.booleans()})
_PARAMETERS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "type": st.fixed_dictionaries({"text": st.text(max_size=20)}),
    "key_combo": st.fixed_dictionaries({"keys": _KEYS}),
    "wait": st.fixed_dictionaries({"duration_ms": st.integers(0, 3_600_000)}),
    "pause_for_human": st.fixed_dictionaries({}, optional={
        "message": st.text(max_size=40),
        "safety_level": st.sampled_from(["standard", "medical_critical"]),
        "safety_checks": st.lists(_CHECK, max_size=3)}),
}


def _with_parameters(action: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    fitting = _PARAMETERS.get(action["type"], st.just({}))
    return fitting.map(lambda p: {**action, "parameters": {**action.get("parameters", {}), **p}})


def _pause_payload_request(deriver: Deriver, derived: st.SearchStrategy[dict[str, Any]]
                           ) -> st.SearchStrategy[dict[str, Any]]:
    pause = deriver.model(Action).map(lambda a: {**a, "type": "pause_for_human"}).flatmap(
        _with_parameters)
    return st.tuples(derived, pause).map(lambda t: {**t[0], "action": t[1]})


Refine = typing.Callable[["Deriver", st.SearchStrategy[dict[str, Any]]],
                         st.SearchStrategy[dict[str, Any]]]
REFINE: dict[type[BaseModel], Refine] = {
    Action: lambda _d, derived: derived.flatmap(_with_parameters),
    BuildPausePayload: _pause_payload_request,
}


_PNG = bytes.fromhex(  # a valid 1x1 PNG, for the handlers that decode screenshots
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


# Envelopes and frames ------------------------------------------------------------------------

def pack(obj: Any) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def envelope(type_name: str, body: Any, msg_id: Any = "fuzz", version: Any = 1) -> bytes:
    return pack({"v": version, "type": type_name, "id": msg_id, "body": body})


def valid_bodies(deriver: Deriver, names: list[str] | None = None
                 ) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """(type name, body) of the given registered types (all by default)."""
    names = names or registered_types()
    return st.sampled_from(names).flatmap(
        lambda n: st.tuples(st.just(n), deriver.model(_model(n))))


def _model(name: str) -> type[Message]:
    model = model_for(name)
    assert model is not None
    return model


def _mutate(name: str, body: dict[str, Any]) -> st.SearchStrategy[bytes]:
    keys = sorted(body)
    mutations = [
        st.tuples(st.sampled_from(keys), Json).map(
            lambda kv: envelope(name, {**body, kv[0]: kv[1]})) if keys else None,
        st.sampled_from(keys).map(
            lambda k: envelope(name, {x: v for x, v in body.items() if x != k})) if keys else None,
        st.text(max_size=8).map(lambda k: envelope(name, {**body, f"unknown_{k}": 1})),
        st.sampled_from(registered_types()).map(lambda other: envelope(other, body)),
        st.sampled_from([0, 2, True, "1", None]).map(lambda v: envelope(name, body, version=v)),
        Json.map(lambda i: envelope(name, body, msg_id=i)),
        st.just(envelope(name, body, msg_id="x" * 129)),
        st.just(pack({"v": 1, "type": name, "id": "fuzz", "body": body, "extra": 0})),
    ]
    return st.one_of(*(m for m in mutations if m is not None))


def structured(deriver: Deriver, names: list[str] | None = None) -> st.SearchStrategy[bytes]:
    """Encoded envelopes of registered types; a quarter of them broken on purpose."""
    def build(item: tuple[str, dict[str, Any]]) -> st.SearchStrategy[bytes]:
        name, body = item
        return weighted((3, st.just(envelope(name, body))), (1, _mutate(name, body)))

    return valid_bodies(deriver, names).flatmap(build)


def unstructured() -> st.SearchStrategy[bytes]:
    """Bytes that are seldom a valid envelope: random, random msgpack, cut or spliced."""
    good = encode(_model("ping")())
    return st.one_of(
        st.binary(max_size=256),
        Json.map(pack),
        st.integers(0, len(good) - 1).map(lambda n: good[:n]),
        st.binary(min_size=1, max_size=16).map(lambda junk: good + junk),
        st.dictionaries(st.sampled_from(["v", "type", "id", "body", "x"]), Json,
                        max_size=5).map(pack),
    )


def frames(payload: st.SearchStrategy[bytes], empty: bool = True
           ) -> st.SearchStrategy[list[bytes]]:
    """The body frames of a request: mostly one, sometimes several or (``empty``) none."""
    return weighted((8, payload.map(lambda p: [p])), (1 if empty else 0, st.just([])),
                    (1, st.lists(payload, min_size=2, max_size=3)))


def wire_value(obj: Any) -> Any:
    """``obj`` as it comes out of msgpack (tuples become lists)."""
    return msgpack.unpackb(pack(obj), raw=False)
