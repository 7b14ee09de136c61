"""The loop_detector actor process: serves ``loop.observe``, ``loop.observe_batch`` and
``loop.forget``.

The decisions are in core.py. This shell reads the configuration, chooses the embedders,
loads the CLIP model on a thread (importing torch and loading a checkpoint takes seconds;
the loop keeps serving and beating meanwhile: screen_static works on the pixel measure
alone until the model is ready), and publishes what the core reports. Observations with a
screenshot run on one worker thread (``Actor.defer``), in order: decoding a PNG and a CLIP
embedding take long, during which the loop goes on answering heartbeats. The others (and
``loop.forget``) are quick and are answered on the loop, unless a request of the same
replay still waits on the worker.

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
from messages import events
from messages.base import Message
from messages.control import ErrorReply
from messages.loop import ForgetReplay, LoopVerdict, LoopVerdicts, ObserveBatch, ObserveStep
from messages.replay import Ack
from runtime.settings import Settings

DISABLED = LoopVerdict(detected=False, evidence={"enabled": False})
"""Every verdict while the kill switch is off (a frozen model: one is enough)."""


class LoopDetectorActor(Actor):
    """Notices an agent going round in circles (docs/screens-and-pauses.md)."""

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
        self._queued: dict[str, int] = {}  # replay -> its requests waiting on the worker
        self._queued_lock = threading.Lock()
        self._evicted_logged = 0
        clip = None
        pixel = PixelEmbedder() if config.enabled else None
        if config.enabled and config.embedder in ("clip", "auto"):
            if config.clip_pretrained:
                clip = ClipEmbedder(config.clip_model, config.clip_pretrained)
            elif config.embedder == "clip":
                self._clip_errors.put("RPA_LOOP_CLIP_PRETRAINED is not set")
        self.core = LoopDetectorCore(config, pixel, clip)
        self.handle(ObserveStep, self.on_observe)
        self.handle(ObserveBatch, self.on_observe_batch)
        self.handle(ForgetReplay, self.on_forget)
        # Not at once: a bus subscriber that joins with us would miss the first event.
        self.every(1.0, self._clip_outcome)
        self.every(1.0, self._evictions)

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

    def _evictions(self, _now: float) -> None:
        """One line a second at most for the replays the LRU forgot (core._rings)."""
        evicted = self.core.evicted
        if evicted != self._evicted_logged:
            logger.warning("loop_detector: more than {} replays observed at once; forgot {} "
                           "(least recently observed first, last {}): raise "
                           "RPA_LOOP_MAX_REPLAYS", self.config.max_replays,
                           evicted - self._evicted_logged, self.core.last_evicted)
            self._evicted_logged = evicted

    def _observe(self, msg: ObserveStep) -> tuple[Message, list[Notice]]:
        """The reply to ``msg`` and the events to publish; the caller holds the lock."""
        try:
            outcome = self.core.observe(msg)
        except BadScreenshot as exc:
            detail = {"replay_id": msg.replay_id, "action_id": msg.action_id}
            return ErrorReply(code="invalid_screenshot", message=str(exc)[:1000],
                              detail=detail), [Notice(events.BAD_MESSAGE, {
                                  "service": self.service, "reason": "invalid_screenshot",
                                  "detail": str(exc)[:500], **detail})]
        return outcome.verdict, outcome.notices

    def _observed(self, msg: ObserveStep, reply: Message, notices: list[Notice]) -> None:
        """On the loop thread (the sockets are there): the events of an observation."""
        self._publish(notices)
        if isinstance(reply, LoopVerdict) and reply.detected:
            logger.warning("loop_detector: replay {} loops after {}: {} {}",
                           msg.replay_id, msg.action_id, reply.signal, reply.evidence)

    def on_observe(self, msg: ObserveStep, req: Incoming) -> Message:
        if not self.config.enabled:  # the kill switch: nothing computed, nothing kept
            return DISABLED
        # Nothing to decode or embed: signals B and C take microseconds, and a hop to the
        # worker thread and back cost more than the whole step (bench/throughput.py). Not
        # while an earlier request of this replay waits on the worker: the steps of a
        # replay change its rings in the order they came.
        if not self._queue(msg.replay_id, always=msg.screenshot_after is not None):
            with self._lock:
                reply, found = self._observe(msg)
            self._observed(msg, reply, found)
            return reply
        notices: list[Notice] = []

        def work() -> Message:
            try:
                with self._lock:
                    reply, found = self._observe(msg)
            finally:
                self._dequeue(msg.replay_id)
            notices.extend(found)
            return reply

        return self.defer(req, work, lambda reply: self._observed(msg, reply, notices))

    def on_observe_batch(self, msg: ObserveBatch, req: Incoming) -> Message:
        """Each step in order, as :meth:`on_observe` would; on the worker thread (all of
        them, in order) if one has a screenshot or a replay of them waits there."""
        if not self.config.enabled:
            return LoopVerdicts(verdicts=[DISABLED] * len(msg.steps),
                                problems=[None] * len(msg.steps))
        to_worker = [self._queue(step.replay_id, always=step.screenshot_after is not None)
                     for step in msg.steps]
        if not any(to_worker):
            with self._lock:
                done = [(step, *self._observe(step)) for step in msg.steps]
            self._batch_observed(done)
            return _verdicts(done)
        queued = [step.replay_id for step, q in zip(msg.steps, to_worker, strict=True) if q]
        done = []

        def work() -> Message:
            try:
                with self._lock:
                    done.extend((step, *self._observe(step)) for step in msg.steps)
            finally:
                for replay_id in queued:
                    self._dequeue(replay_id)
            return _verdicts(done)

        return self.defer(req, work, lambda _reply: self._batch_observed(done))

    def _batch_observed(self, done: list[tuple[ObserveStep, Message, list[Notice]]]) -> None:
        for step, reply, notices in done:
            self._observed(step, reply, notices)

    def on_forget(self, msg: ForgetReplay, req: Incoming) -> Message:
        def forget() -> Message:
            with self._lock:
                known = self.core.forget(msg.replay_id)
                return Ack(status="forgotten" if known else "unknown",
                           detail={"replays": self.core.replays})

        if not self._queue(msg.replay_id):
            return forget()  # a dict pop: no hop to the worker needed

        def work() -> Message:  # after the observations of this replay still queued
            try:
                return forget()
            finally:
                self._dequeue(msg.replay_id)

        return self.defer(req, work)

    def _queue(self, replay_id: str, always: bool = False) -> bool:
        """Whether a request of ``replay_id`` must go to the worker (``always``, or an
        earlier one waits there); if so it is counted until :meth:`_dequeue`. On the loop:
        only the loop queues, so the answer holds until the caller is done."""
        with self._queued_lock:  # not the core's: the worker holds that while it decodes
            waiting = self._queued.get(replay_id, 0)
            if waiting or always:
                self._queued[replay_id] = waiting + 1
            return bool(waiting or always)

    def _dequeue(self, replay_id: str) -> None:
        """On the worker: a queued request of ``replay_id`` is done with the core."""
        with self._queued_lock:
            left = self._queued.pop(replay_id) - 1
            if left:
                self._queued[replay_id] = left


def _verdicts(done: list[tuple[ObserveStep, Message, list[Notice]]]) -> LoopVerdicts:
    """The batch's answer: each step's verdict, or None and why (its ErrorReply)."""
    return LoopVerdicts(
        verdicts=[r if isinstance(r, LoopVerdict) else None for _s, r, _n in done],
        problems=[r.message if isinstance(r, ErrorReply) else None for _s, r, _n in done])
