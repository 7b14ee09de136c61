"""The loop detector's settings: the origin spec's env vars and ours
(docs/operations.md), with their defaults.

A value that does not validate is ignored with a warning (its default applies): a typo in
a tuning knob must not stop the actor that keeps a stuck agent from going on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

EmbedderChoice = Literal["pixel", "clip", "auto"]

ENV: dict[str, str] = {
    # The names kept from the seed specification (RPA_), docs/operations.md, "Settings".
    "enabled": "RPA_LOOP_DETECTOR_ENABLED",
    "screen_static_threshold": "RPA_LOOP_SCREEN_STATIC_THRESHOLD",
    "screen_static_n": "RPA_LOOP_SCREEN_STATIC_N",
    "action_repeat_n": "RPA_LOOP_ACTION_REPEAT_N",
    "retry_threshold": "RPA_LOOP_RETRY_THRESHOLD",
    # ours
    "ring_size": "RPA_LOOP_RING_SIZE",
    "max_replays": "RPA_LOOP_MAX_REPLAYS",
    "embedder": "RPA_LOOP_EMBEDDER",
    "clip_model": "RPA_LOOP_CLIP_MODEL",
    "clip_pretrained": "RPA_LOOP_CLIP_PRETRAINED",
}


class LoopConfig(BaseModel):
    """Defaults are the spec's; ``from_env`` reads the variables named in :data:`ENV`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    """Kill switch: False answers every observation with detected=false, computing nothing."""
    screen_static_threshold: float = Field(0.99, ge=0.0, le=1.0)
    """Signal A with ``clip``: cosine above which two screens are the same kind of screen."""
    screen_static_n: int = Field(4, ge=2, le=16)
    """Signal A: captures in a row with no progress between them."""
    action_repeat_n: int = Field(3, ge=2, le=16)
    """Signal B: identical actions in a row (that changed nothing)."""
    retry_threshold: int = Field(3, ge=1, le=1000)
    """Signal C: business retries of one step."""
    ring_size: int = Field(5, ge=2, le=32)
    """Steps remembered per replay (raised to the largest N above if smaller)."""
    max_replays: int = Field(512, ge=1, le=100_000)
    """Replays remembered at once; the least recently observed is forgotten beyond."""
    embedder: EmbedderChoice = "auto"
    """``pixel``; ``clip`` (pixel + CLIP, see clip.py); ``auto`` = clip if a checkpoint is
    configured and loads, else pixel."""
    clip_model: str = Field("ViT-B-32", min_length=1, max_length=100)
    clip_pretrained: str | None = Field(None, min_length=1, max_length=4096)
    """A local checkpoint file (.pt / .safetensors); nothing is ever downloaded."""

    @model_validator(mode="after")
    def _ring_holds_the_runs(self) -> LoopConfig:
        wanted = max(self.ring_size, self.screen_static_n, self.action_repeat_n)
        if wanted != self.ring_size:
            object.__setattr__(self, "ring_size", wanted)
        return self

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> tuple[LoopConfig, list[str]]:
        """The configuration in ``env`` (default ``os.environ``) and what was ignored in it."""
        env = os.environ if env is None else env
        raw = {name: env[var].strip() for name, var in ENV.items()
               if var in env and env[var].strip() != ""}
        if "embedder" in raw:
            raw["embedder"] = raw["embedder"].lower()
        problems: list[str] = []
        while True:
            try:
                return cls.model_validate(raw), problems
            except ValidationError as exc:
                bad = {str(err["loc"][0]) for err in exc.errors() if err["loc"]}
                if not bad & raw.keys():
                    raise
                for name in sorted(bad & raw.keys()):
                    problems.append(f"{ENV[name]}={raw.pop(name)!r} ignored (invalid);"
                                    f" default {cls.model_fields[name].default!r} used")
