"""The safety_checks actor process: answers BuildPausePayload
(docs/screens-and-pauses.md).

A pause that calls the local model may take up to RPA_SAFETY_CHECKS_LLM_TIMEOUT_S; that call
runs on a worker thread (:meth:`Actor.defer`) so heartbeats and other requests go on. The
timeout counts from the request's arrival: a request waiting for a free thread is not
given more time than one served at once.
"""

from __future__ import annotations

import time

from loguru import logger

from actors.base import Actor, Incoming
from actors.safety_checks.core import (
    SafetyChecksConfig,
    build_pause_payload,
    events_for,
    wants_llm,
)
from actors.safety_checks.llm import LlmClient
from actors.safety_checks.ollama import OllamaClient
from messages.base import Message
from messages.safety_checks import BuildPausePayload, PausePayload
from runtime.settings import Settings


class SafetyChecksActor(Actor):
    """Builds the checklist a person acknowledges before a critical step."""

    service = "safety_checks"

    def __init__(self, settings: Settings, config: SafetyChecksConfig | None = None,
                 llm: LlmClient | None = None) -> None:
        super().__init__(settings)
        self.config = config or SafetyChecksConfig()
        self.llm: LlmClient = llm or OllamaClient(self.config.ollama_url)
        self.handle(BuildPausePayload, self.on_build)

    def on_start(self) -> None:
        c = self.config
        logger.info("safety_checks: llm {} (model {}, {}, timeout {:g} s, max {} checks, "
                    "fail {})", "enabled" if c.llm_enabled else "DISABLED", c.llm_model,
                    self.llm.url, c.llm_timeout_s, c.llm_max_checks, c.llm_fail_mode)

    def on_build(self, msg: BuildPausePayload, req: Incoming) -> Message:
        if not wants_llm(msg.action, self.config):
            payload = build_pause_payload(msg.action, msg.context, msg.last_screenshot, None,
                                          self.config)
            self._published(msg, payload)
            return payload
        received = time.monotonic()
        # The dispatcher may have spent part of the deadline on a fresh capture.
        deadline_s = min(self.config.llm_timeout_s, msg.time_left_s if msg.time_left_s
                         is not None else self.config.llm_timeout_s)

        def work() -> Message:
            budget = deadline_s - (time.monotonic() - received)
            return build_pause_payload(msg.action, msg.context, msg.last_screenshot,
                                       self.llm, self.config, budget_s=budget)

        return self.defer(req, work, then=lambda reply: self._published(msg, reply))

    def _published(self, msg: BuildPausePayload, reply: Message) -> None:
        if not isinstance(reply, PausePayload):
            return
        for topic, data in events_for(msg, reply):
            self.publish(topic, **data)
        llm = reply.llm
        if llm is not None and llm.error is not None:
            logger.warning("safety_checks: {} {}: no contextual checks ({}: {})",
                           msg.replay_id, msg.action.action_id, llm.error, llm.error_detail)
