"""The loop_detector actor process: serves ``loop.observe`` and ``loop.forget``.

The decisions are in core.py. This shell reads the configuration, chooses the embedders,
loads the CLIP model on a thread (importing torch and loading a checkpoint takes seconds;
the loop keeps serving and beating meanwhile: screen_static works on the pixel measure
alone until the model is ready), and publishes what the core reports. Observations run on
one worker thread (``Actor.defer``), in order: decoding a PNG and a CLIP embedding take
10-150 ms, during which the loop goes on answering heartbeats.

One worker of this service holds the rings of the replays it observed: run one per tree.
"""

from __future__ import annotations

import queue
import threading

from loguru import logger

from actors.base import Actor, Incoming
from actors.loop_detector.clip import ClipEmbedder, ClipUnavailable
from actors.loop_detector.config import LoopConfig
from actors.loop_detector.core import LoopDetectorCore, Notice
from actors.loop_detector.pixel import BadScreenshot, PixelEmbedder
from broker.config import Settings
from messages import events
from messages.base import Message
from messages.control import ErrorReply
from messages.loop import ForgetReplay, LoopVerdict, ObserveStep
from messages.replay import Ack


class LoopDetectorActor(Actor):
    """Notices an agent going round in circles (spec/01 §5)."""

    service = "loop_detector"
    deferred_workers = 1  # one observation at a time, in the order received

    def __init__(self, settings: Settings, config: LoopConfig | None = None) -> None:
        super().__init__(settings)
        self._problems: list[str] = []
        if config is None:
            config, self._problems = LoopConfig.from_env()
        self.config = config
        self._clip_errors: queue.SimpleQueue[str] = queue.SimpleQueue()  # from the loader
        self._lock = threading.Lock()  # the core: the deferred worker and the loop's timer
        clip = None
        pixel = PixelEmbedder() if config.enabled else None
        if config.enabled and config.embedder in ("clip", "auto"):
            if config.clip_pretrained:
                clip = ClipEmbedder(config.clip_model, config.clip_pretrained)
            elif config.embedder == "clip":
                self._clip_errors.put("RPA_LOOP_CLIP_PRETRAINED is not set")
        self.core = LoopDetectorCore(config, pixel, clip)
        self.handle(ObserveStep, self.on_observe)
        self.handle(ForgetReplay, self.on_forget)
        # Not at once: a bus subscriber that joins with us would miss the first event.
        self.every(1.0, self._clip_outcome)

    def on_start(self) -> None:
        for problem in self._problems:
            logger.warning("loop_detector: {}", problem)
        c = self.config
        if not c.enabled:
            logger.warning("loop_detector: disabled (RPA_LOOP_DETECTOR_ENABLED=0): every "
                           "observation is answered detected=false")
            return
        logger.info("loop_detector: embedder={} N(static)={} N(repeat)={} retries={} ring={} "
                    "max_replays={}", c.embedder, c.screen_static_n, c.action_repeat_n,
                    c.retry_threshold, c.ring_size, c.max_replays)
        clip = self.core.clip
        if isinstance(clip, ClipEmbedder):
            threading.Thread(target=self._load_clip, args=(clip,), name="clip-load",
                             daemon=True).start()

    def _load_clip(self, clip: ClipEmbedder) -> None:
        """On a thread: load the model; the loop picks up a failure (sockets stay there)."""
        try:
            clip.load()
            logger.info("loop_detector: clip model {} loaded from {}", clip.model_name,
                        clip.pretrained)
        except ClipUnavailable as exc:
            self._clip_errors.put(str(exc))
        except Exception as exc:  # an unexpected failure must not pass silently either
            self._clip_errors.put(f"{type(exc).__name__}: {exc}")

    def _clip_outcome(self, _now: float) -> None:
        while not self._clip_errors.empty():
            error = self._clip_errors.get()
            with self._lock:
                notices = self.core.clip_unavailable(error,
                                                     fallback=self.config.embedder == "auto")
            self._publish(notices)

    def _publish(self, notices: list[Notice]) -> None:
        for notice in notices:
            self.publish(notice.topic, **notice.data)

    def on_observe(self, msg: ObserveStep, req: Incoming) -> Message:
        if not self.config.enabled:  # the kill switch: nothing computed, nothing kept
            return LoopVerdict(detected=False, evidence={"enabled": False})
        notices: list[Notice] = []

        def work() -> Message:
            with self._lock:
                try:
                    outcome = self.core.observe(msg)
                except BadScreenshot as exc:
                    detail = {"replay_id": msg.replay_id, "action_id": msg.action_id}
                    notices.append(Notice(events.BAD_MESSAGE, {
                        "service": self.service, "reason": "invalid_screenshot",
                        "detail": str(exc)[:500], **detail}))
                    return ErrorReply(code="invalid_screenshot", message=str(exc)[:1000],
                                      detail=detail)
            notices.extend(outcome.notices)
            return outcome.verdict

        def then(reply: Message) -> None:  # on the loop thread: the sockets are here
            self._publish(notices)
            if isinstance(reply, LoopVerdict) and reply.detected:
                logger.warning("loop_detector: replay {} loops after {}: {} {}",
                               msg.replay_id, msg.action_id, reply.signal, reply.evidence)

        if msg.screenshot_after is None:
            # Nothing to decode or embed: signals B and C take microseconds, and a hop to
            # the worker thread and back cost more than the whole step (bench/throughput.py).
            reply = work()
            then(reply)
            return reply
        return self.defer(req, work, then)

    def on_forget(self, msg: ForgetReplay, req: Incoming) -> Message:
        def work() -> Message:
            with self._lock:
                known = self.core.forget(msg.replay_id)
                return Ack(status="forgotten" if known else "unknown",
                           detail={"replays": self.core.replays})

        return self.defer(req, work)
