"""Windows calls behind :mod:`agent.screen.geometry` (ctypes, user32 / shcore).

Written for the hospital workstations (Windows 10/11) and tested under Windows CPython in
Wine (tests/integration/test_win_desktop.py); the functions exist everywhere so the module
imports, but off Windows they raise :class:`OSError`.

Per-monitor DPI: with screens of different scale factors, a DPI-unaware (or system-aware)
process sees virtualised coordinates that disagree from one monitor to the next (pyautogui
#697). :func:`ensure_dpi_awareness` asks for PER_MONITOR_AWARE_V2 (Windows 10 1703+), else
per-monitor (8.1+), else system-aware (Vista+), once, before any of screeninfo, mss or
pyautogui run; when granted, every rectangle, pointer position and click is in physical
pixels. :func:`dpi_reading` reads what is in effect, and agent/screen/dpi.py decides whether
clicks may be placed when it was not granted (docs/windows-scaling.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from collections.abc import Iterator
from typing import Any

from agent.screen.dpi import Awareness, DpiReading, MonitorDpi

MAX_TITLE = 1024
_PER_MONITOR_AWARE_V2 = -4  # DPI_AWARENESS_CONTEXT_PER_MONITOR_AWARE_V2
_PER_MONITOR_AWARE = -3  # DPI_AWARENESS_CONTEXT_PER_MONITOR_AWARE
_PROCESS_PER_MONITOR_DPI_AWARE = 2
_MDT_EFFECTIVE_DPI = 0
_asked: str | None = None
"""What the request for per-monitor awareness got (None: not asked yet)."""


def _user32() -> Any:
    if sys.platform != "win32":
        raise OSError("win32 calls are only available on Windows")
    return ctypes.WinDLL("user32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]


def _shcore() -> Any:
    return ctypes.WinDLL("shcore")  # type: ignore[attr-defined,unused-ignore]


def ensure_dpi_awareness() -> str:
    """Ask for per-monitor DPI awareness (first call only) and say what it got: the call
    that succeeded, or each refusal with its error (the awareness was already set by a
    manifest or a compatibility setting; Wine 8 refuses both, being per-monitor aware
    from the start). Whatever it says, :func:`dpi_reading` reads the awareness in effect."""
    global _asked
    if _asked is not None or sys.platform != "win32":
        return _asked or "not asked (not Windows)"
    user32, tried = _user32(), []
    try:
        if user32.SetProcessDpiAwarenessContext(ctypes.c_void_p(_PER_MONITOR_AWARE_V2)):
            _asked = "SetProcessDpiAwarenessContext(PER_MONITOR_AWARE_V2) succeeded"
            return _asked
        tried.append("SetProcessDpiAwarenessContext(PER_MONITOR_AWARE_V2) refused, error "
                     f"{ctypes.get_last_error()}")  # type: ignore[attr-defined,unused-ignore]
    except AttributeError:
        tried.append("no SetProcessDpiAwarenessContext (before Windows 10 1703)")
    try:
        result = int(_shcore().SetProcessDpiAwareness(_PROCESS_PER_MONITOR_DPI_AWARE))
    except (AttributeError, OSError):
        tried.append("no SetProcessDpiAwareness (before Windows 8.1)")
        done = user32.SetProcessDPIAware()
        tried.append(f"SetProcessDPIAware {'succeeded' if done else 'refused'}")
    else:
        tried.append("SetProcessDpiAwareness(PER_MONITOR) " + (
            "succeeded" if result == 0 else f"refused, HRESULT 0x{result & 0xFFFFFFFF:08X}"))
    _asked = "; ".join(tried)
    return _asked


def _awareness(user32: Any) -> Awareness | None:
    """The calling thread's DPI awareness (Windows 10 1607+), else the process's (8.1+),
    else whether it is DPI aware at all (Vista+); None if none of them answers."""
    try:
        user32.GetThreadDpiAwarenessContext.restype = ctypes.c_void_p
        user32.GetAwarenessFromDpiAwarenessContext.argtypes = [ctypes.c_void_p]
        value = int(user32.GetAwarenessFromDpiAwarenessContext(
            user32.GetThreadDpiAwarenessContext()))
    except AttributeError:
        try:
            found = ctypes.c_int(-1)
            if _shcore().GetProcessDpiAwareness(None, ctypes.byref(found)) != 0:
                return None
            value = found.value
        except (AttributeError, OSError):
            return Awareness.SYSTEM if user32.IsProcessDPIAware() else Awareness.UNAWARE
    return Awareness(value) if value in (0, 1, 2) else None


@contextlib.contextmanager
def _per_monitor_thread(user32: Any) -> Iterator[bool]:
    """This thread per-monitor aware for the block (Windows 10 1607+), so that monitor
    rectangles and DPIs are physical whatever the process's awareness; yields whether it is."""
    try:
        user32.SetThreadDpiAwarenessContext.restype = ctypes.c_void_p
        user32.SetThreadDpiAwarenessContext.argtypes = [ctypes.c_void_p]
    except AttributeError:
        yield False
        return
    previous = None
    for context in (_PER_MONITOR_AWARE_V2, _PER_MONITOR_AWARE):
        previous = user32.SetThreadDpiAwarenessContext(ctypes.c_void_p(context))
        if previous:
            break
    try:
        yield bool(previous)
    finally:
        if previous:
            user32.SetThreadDpiAwarenessContext(ctypes.c_void_p(previous))


_MonitorEnumProc = getattr(ctypes, "WINFUNCTYPE", ctypes.CFUNCTYPE)(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ssize_t)


def dpi_reading() -> DpiReading:
    """The awareness in effect, the system DPI and each monitor's effective DPI, read from
    a per-monitor aware thread (GetDpiForMonitor tells only those the monitor's own DPI);
    DPIs are None where that cannot be done (before Windows 10 1607 in a process that is
    not per-monitor aware)."""
    user32 = _user32()
    awareness = _awareness(user32)
    handles: list[int] = []

    def found(monitor: int, _dc: int, _rect: int, _data: int) -> int:
        handles.append(monitor)
        return 1

    with _per_monitor_thread(user32) as switched:
        true_dpi = switched or awareness == Awareness.PER_MONITOR
        callback = _MonitorEnumProc(found)
        user32.EnumDisplayMonitors(None, None, callback, 0)
        monitors = tuple(MonitorDpi(_monitor_rect(user32, h),
                                    _monitor_dpi(h) if true_dpi else None) for h in handles)
        try:
            system = int(user32.GetDpiForSystem()) if true_dpi else None
        except AttributeError:
            system = None
    return DpiReading(awareness, system, monitors, _asked or "not asked")


class _MonitorInfo(ctypes.Structure):
    _fields_ = [("cbSize", ctypes.c_uint32), ("left", ctypes.c_long), ("top", ctypes.c_long),
                ("right", ctypes.c_long), ("bottom", ctypes.c_long),
                ("work", ctypes.c_long * 4), ("flags", ctypes.c_uint32)]


def _monitor_rect(user32: Any, handle: int) -> tuple[int, int, int, int]:
    info = _MonitorInfo()
    info.cbSize = ctypes.sizeof(_MonitorInfo)
    if not user32.GetMonitorInfoW(ctypes.c_void_p(handle), ctypes.byref(info)):
        return 0, 0, 0, 0
    return info.left, info.top, info.right - info.left, info.bottom - info.top


def _monitor_dpi(handle: int) -> int | None:
    x, y = ctypes.c_uint(), ctypes.c_uint()
    try:
        result = _shcore().GetDpiForMonitor(ctypes.c_void_p(handle), _MDT_EFFECTIVE_DPI,
                                            ctypes.byref(x), ctypes.byref(y))
    except (AttributeError, OSError):
        return None
    return int(x.value) if result == 0 and x.value > 0 else None


class _Rect(ctypes.Structure):
    _fields_ = [("left", ctypes.c_long), ("top", ctypes.c_long),
                ("right", ctypes.c_long), ("bottom", ctypes.c_long)]


class _Point(ctypes.Structure):
    _fields_ = [("x", ctypes.c_long), ("y", ctypes.c_long)]


def foreground() -> tuple[bool, str | None]:
    """``(a window is in front, its title or None)``: GetForegroundWindow + GetWindowTextW.

    No foreground window is what a program on the person's desktop sees while the UAC
    secure desktop or the lock screen is up (they live on another desktop); a title that
    cannot be read (empty, or another integrity level refusing WM_GETTEXT) is treated the
    same by the executor (docs/screens-and-pauses.md, "Fail closed before input")."""
    user32 = _user32()
    user32.GetForegroundWindow.restype = ctypes.c_void_p
    hwnd = user32.GetForegroundWindow()
    if not hwnd:
        return False, None
    hwnd = ctypes.c_void_p(hwnd)
    length = min(int(user32.GetWindowTextLengthW(hwnd)), MAX_TITLE)
    buffer = ctypes.create_unicode_buffer(length + 1)
    user32.GetWindowTextW(hwnd, buffer, length + 1)
    return True, buffer.value or None


def active_window_title() -> str | None:
    """The foreground window's title; None when no window is in front (lock screen, UAC
    secure desktop) or its title cannot be read."""
    return foreground()[1]


def active_window_rect() -> tuple[int, int, int, int] | None:
    """GetWindowRect of the foreground window (includes the invisible resize borders, a few
    pixels: harmless for choosing the monitor holding most of it)."""
    user32 = _user32()
    user32.GetForegroundWindow.restype = ctypes.c_void_p
    hwnd = user32.GetForegroundWindow()
    rect = _Rect()
    if not hwnd or not user32.GetWindowRect(ctypes.c_void_p(hwnd), ctypes.byref(rect)):
        return None
    return rect.left, rect.top, rect.right - rect.left, rect.bottom - rect.top


class _GuiThreadInfo(ctypes.Structure):
    _fields_ = [("cbSize", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("hwndActive", ctypes.c_void_p), ("hwndFocus", ctypes.c_void_p),
                ("hwndCapture", ctypes.c_void_p), ("hwndMenuOwner", ctypes.c_void_p),
                ("hwndMoveSize", ctypes.c_void_p), ("hwndCaret", ctypes.c_void_p),
                ("rcCaret", _Rect)]


def focus_rect() -> tuple[int, int, int, int] | None:
    """Where keyboard input goes: the caret's rectangle if the foreground thread shows one
    (GetGUIThreadInfo's rcCaret, client coordinates of hwndCaret, mapped to the screen),
    else the focused control's GetWindowRect; None when no window has the focus."""
    user32 = _user32()
    hwnd = user32.GetForegroundWindow()
    if not hwnd:
        return None
    thread = user32.GetWindowThreadProcessId(ctypes.c_void_p(hwnd), None)
    info = _GuiThreadInfo()
    info.cbSize = ctypes.sizeof(_GuiThreadInfo)
    if not user32.GetGUIThreadInfo(thread, ctypes.byref(info)):
        return None
    caret = info.rcCaret
    if info.hwndCaret and caret.bottom > caret.top:
        corners = (_Point * 2)(_Point(caret.left, caret.top), _Point(caret.right, caret.bottom))
        user32.MapWindowPoints(ctypes.c_void_p(info.hwndCaret), None, corners, 2)
        a, b = corners[0], corners[1]
        return a.x, a.y, max(1, b.x - a.x), max(1, b.y - a.y)
    rect = _Rect()
    if not info.hwndFocus or not user32.GetWindowRect(ctypes.c_void_p(info.hwndFocus),
                                                      ctypes.byref(rect)):
        return None
    return rect.left, rect.top, rect.right - rect.left, rect.bottom - rect.top


def pointer_position() -> tuple[int, int] | None:
    point = _Point()
    if not _user32().GetCursorPos(ctypes.byref(point)):
        return None
    return point.x, point.y
