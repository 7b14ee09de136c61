"""X11 calls behind :mod:`agent.screen.geometry` (python-xlib): RandR monitors, the active
window, the pointer.

One connection per thread (Xlib connections are not thread-safe), reopened when ``DISPLAY``
changes or the server went away. Every function raises on failure; geometry.py turns that
into "unknown".
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.screen.raw_monitor import RawMonitor

MAX_TITLE = 1024
_local = threading.local()


def _display() -> Any:
    """This thread's connection to ``$DISPLAY`` (raises if there is none)."""
    from Xlib import display as xdisplay

    name = os.environ.get("DISPLAY")
    if not name:
        raise RuntimeError("no X display (DISPLAY is not set)")
    cached = getattr(_local, "conn", None)
    if cached is not None and cached[0] == name:
        return cached[1]
    _close()
    conn = xdisplay.Display(name)
    _local.conn = (name, conn)
    return conn


def _close() -> None:
    cached = getattr(_local, "conn", None)
    _local.conn = None
    if cached is not None:
        try:
            cached[1].close()
        except Exception:
            pass  # the server is gone already


def _call(fn: Any) -> Any:
    """Run ``fn(display)``; after a connection error (the server restarted, perhaps under the
    same display number), once more on a fresh connection."""
    from Xlib import error as xerror

    try:
        return fn(_display())
    except (xerror.ConnectionClosedError, OSError):
        _close()
    try:
        return fn(_display())
    except (xerror.ConnectionClosedError, OSError):
        _close()
        raise


def randr_monitors() -> list[RawMonitor]:
    """RandR 1.5 monitors with their names and primary flag ([] without RandR 1.5)."""
    from Xlib.ext import randr

    from agent.screen.raw_monitor import RawMonitor

    def read(d: Any) -> list[RawMonitor]:
        if not d.has_extension("RANDR"):
            return []
        version = randr.query_version(d)
        if (version.major_version, version.minor_version) < (1, 5):
            return []
        reply = randr.get_monitors(d.screen().root, True)
        return [RawMonitor(int(m["x"]), int(m["y"]), int(m["width_in_pixels"]),
                           int(m["height_in_pixels"]), bool(m["primary"]),
                           d.get_atom_name(m["name"]) or None)
                for m in reply.monitors]

    result: list[RawMonitor] = _call(read)
    return result


def _title_of(d: Any, window: Any) -> str | None:
    net_name = window.get_full_property(d.intern_atom("_NET_WM_NAME"),
                                        d.intern_atom("UTF8_STRING"))
    if net_name is not None and net_name.value:
        value = net_name.value
        return (value.decode("utf-8", "replace") if isinstance(value, bytes)
                else str(value))[:MAX_TITLE]
    legacy = window.get_wm_name()
    if legacy:
        return (legacy.decode("latin-1") if isinstance(legacy, bytes) else str(legacy))[
            :MAX_TITLE]
    return None


def _active(d: Any) -> tuple[Any, str | None] | None:
    """The active window and its title: the window manager's choice, else the input focus
    walked up to its first named ancestor; None if that window is not on screen (openbox
    keeps naming a window just closed or minimised when no other takes its place: it is not
    in front, docs/screens-and-pauses.md)."""
    root = d.screen().root
    prop = root.get_full_property(d.intern_atom("_NET_ACTIVE_WINDOW"), 0)  # AnyPropertyType
    if prop is not None and len(prop.value) and int(prop.value[0]):
        window = d.create_resource_object("window", int(prop.value[0]))
        return (window, _title_of(d, window)) if _viewable(window) else None
    window = d.get_input_focus().focus
    while hasattr(window, "id") and window.id != root.id:  # not X.NONE / PointerRoot
        title = _title_of(d, window)
        if title is not None:
            return (window, title) if _viewable(window) else None
        window = window.query_tree().parent
    return None


def _viewable(window: Any) -> bool:
    from Xlib import X

    return bool(window.get_attributes().map_state == X.IsViewable)


def foreground() -> tuple[bool, str | None]:
    """``(an active window can be read, its title or None)``."""
    found = _call(_active)
    return (False, None) if found is None else (True, found[1])


def active_window_title() -> str | None:
    return foreground()[1]


def active_window_rect() -> tuple[int, int, int, int] | None:
    def read(d: Any) -> tuple[int, int, int, int] | None:
        found = _active(d)
        if found is None:
            return None
        window = found[0]
        geometry = window.get_geometry()
        origin = d.screen().root.translate_coords(window, 0, 0)
        return int(origin.x), int(origin.y), int(geometry.width), int(geometry.height)

    result: tuple[int, int, int, int] | None = _call(read)
    return result


def pointer_position() -> tuple[int, int] | None:
    def read(d: Any) -> tuple[int, int] | None:
        pointer = d.screen().root.query_pointer()
        return (int(pointer.root_x), int(pointer.root_y)) if pointer.same_screen else None

    result: tuple[int, int] | None = _call(read)
    return result


def focus_rect() -> tuple[int, int, int, int] | None:
    """The input-focus window's rectangle in root pixels. X11 knows the focused window, not
    the control or caret inside it: with toolkits drawing their own widgets (Tk, GTK) this
    is the toplevel; with one X window per control (Xt, Motif) the control itself."""
    def read(d: Any) -> tuple[int, int, int, int] | None:
        window = d.get_input_focus().focus
        root = d.screen().root
        if not hasattr(window, "id") or window.id == root.id:  # None / PointerRoot
            return None
        geometry = window.get_geometry()
        origin = root.translate_coords(window, 0, 0)
        return int(origin.x), int(origin.y), int(geometry.width), int(geometry.height)

    result: tuple[int, int, int, int] | None = _call(read)
    return result
