"""The agent's view of the real screen: monitors, focus, active window (and capture).

- :mod:`agent.screen.geometry`: the monitors (screeninfo, mss as cross-check), the focused
  monitor, the active window title; numbered the same way on every agent.
- :mod:`agent.screen.x11` / :mod:`agent.screen.win32`: the platform calls behind them.
- :mod:`agent.screen.dpi`: Windows display scaling, and when clicks must be refused (pure).
- :mod:`agent.screen.probe`: what a heartbeat reports (pluggable: real screen or simulated).
"""

import ctypes
import ctypes.util
import sys


def _x_threads() -> None:
    """Make libX11 safe across threads before anything opens a display.

    mss and screeninfo call libX11 through ctypes, from the execution thread (capture) and
    the heartbeat probe thread at once; without XInitThreads that corrupts libX11's heap
    (seen: "malloc(): unaligned tcache chunk detected" in an agent under load).
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(ctypes.util.find_library("X11") or "libX11.so.6").XInitThreads()
    except (OSError, AttributeError):
        pass  # no libX11: nothing here will use it


_x_threads()
