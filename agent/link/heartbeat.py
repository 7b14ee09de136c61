"""Screen heartbeats: the agent tells ``monitor_router`` its monitors, focus and window title.

A sampling thread reads the screen (``poll_s``: focus and title; ``interval_s``: the monitors
too), so a slow screen never stalls the agent's loop; the loop calls :meth:`Heartbeats.tick`,
which sends an :class:`~messages.monitor.AgentHeartbeat` every ``interval_s`` and as soon as
the sample changed (a focus change), one request at a time (ZeroMQ sockets stay in the loop's
thread). A router that does not answer costs nothing but a log line: heartbeats are
observations, the next one replaces a lost one.

Settings, from the environment: ``LEA_MONITOR_HEARTBEAT_INTERVAL_S`` (2), ``..._POLL_S``
(0.5), ``..._TIMEOUT_S`` (2), ``..._ENABLED`` (1).
"""

from __future__ import annotations

import threading
import time

from loguru import logger
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent.screen.probe import ScreenProbe, ScreenState
from messages.base import Message
from messages.codec import Envelope
from messages.control import ErrorReply
from messages.monitor import MAX_MONITORS, AgentHeartbeat, Monitor
from transport.client import CallFailed, Client

MONITOR_ROUTER = "monitor_router"
MAX_TITLE = 1024


class HeartbeatConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LEA_MONITOR_HEARTBEAT_", frozen=True)

    enabled: bool = True
    interval_s: float = Field(2.0, gt=0, le=3600)
    poll_s: float = Field(0.5, gt=0, le=60)
    timeout_s: float = Field(2.0, gt=0, le=60)


class Heartbeats:
    """``start()`` the sampler, ``tick(now)`` from the loop, ``stop()`` at the end."""

    def __init__(self, machine_id: str, client: Client, probe: ScreenProbe,
                 config: HeartbeatConfig | None = None) -> None:
        self.machine_id = machine_id
        self.client = client
        self.probe = probe
        self.config = config or HeartbeatConfig()
        self._lock = threading.Lock()
        self._state: ScreenState | None = None
        self._version = 0
        self._sent_version = 0
        self._next_due = 0.0
        self._pending = False
        self._router_answering: bool | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_loop, name="screen-sampler",
                                        daemon=True)
        self.sent = 0

    # Sampling thread ------------------------------------------------------------------------

    def start(self) -> None:
        if self.config.enabled:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def _sample_loop(self) -> None:
        monitors: list[Monitor] = []
        next_geometry = 0.0
        while True:
            now = time.monotonic()
            try:
                if now >= next_geometry:
                    monitors = self.probe.monitors()[:MAX_MONITORS]
                    next_geometry = now + self.config.interval_s
                index, title = self.probe.focus(monitors)
            except Exception:  # a probe must not kill the thread: report what is known
                logger.exception("screen sampling failed")
                index, title = None, None
            state = ScreenState(monitors, index if index is None or 0 <= index < MAX_MONITORS
                                else None, None if title is None else title[:MAX_TITLE])
            with self._lock:
                if state != self._state:
                    self._state = state
                    self._version += 1
            if self._stop.wait(self.config.poll_s):
                return

    @property
    def router_answering(self) -> bool:
        """Whether monitor_router took the last heartbeat."""
        return bool(self._router_answering)

    def latest(self) -> ScreenState | None:
        """The last sample (None before the first)."""
        with self._lock:
            return self._state

    # Loop side ------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Send a heartbeat if one is due or the screen changed, and none is in flight."""
        if self._pending or not self.config.enabled:
            return
        with self._lock:
            state, version = self._state, self._version
        if state is None or (version == self._sent_version and now < self._next_due):
            return
        try:
            beat = AgentHeartbeat(machine_id=self.machine_id, monitor_index=state.monitor_index,
                                  monitors_geometry=state.monitors,
                                  active_window_title=state.active_window_title, at=time.time())
        except ValueError:
            logger.exception("screen sample does not fit a heartbeat: {}", state)
            self._sent_version, self._next_due = version, now + self.config.interval_s
            return
        self._pending = True
        self._sent_version, self._next_due = version, now + self.config.interval_s
        self.client.call(MONITOR_ROUTER, beat, self._answered, timeout_s=self.config.timeout_s,
                         retries=0)
        self.sent += 1

    def _answered(self, reply: Envelope[Message] | None, error: CallFailed | None) -> None:
        self._pending = False
        answering = reply is not None and not isinstance(reply.body, ErrorReply)
        if answering != self._router_answering:
            if answering:
                logger.info("monitor_router takes our screen heartbeats")
            elif reply is not None and isinstance(reply.body, ErrorReply):
                logger.warning("monitor_router refused a heartbeat: {} {}", reply.body.code,
                               reply.body.message)
            else:
                logger.warning("monitor_router does not answer heartbeats ({}); monitors will"
                               " be routed to the composite until it does", error)
            self._router_answering = answering
