"""Windows calls behind :mod:`agent.screen.geometry` (ctypes, user32 / shcore).

Written for the hospital workstations (Windows 10/11) and tested under Windows CPython in
Wine (tests/integration/test_win_desktop.py); the functions exist everywhere so the module
imports, but off Windows they raise :class:`OSError`.

Per-monitor DPI: with screens of different scale factors, a DPI-unaware (or system-aware)
process sees virtualised coordinates that disagree from one monitor to the next (pyautogui
#697). :func:`ensure_dpi_awareness` asks for PER_MONITOR_AWARE_V2 (Windows 10 1703+), else
per-monitor (8.1+), else system-aware (Vista+), once, before any of screeninfo, mss or
pyautogui run; afterwards every rectangle, pointer position and click is in physical pixels.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

MAX_TITLE = 1024
_PER_MONITOR_AWARE_V2 = -4  # DPI_AWARENESS_CONTEXT_PER_MONITOR_AWARE_V2
_PROCESS_PER_MONITOR_DPI_AWARE = 2
_aware = False


def _user32() -> Any:
    if sys.platform != "win32":
        raise OSError("win32 calls are only available on Windows")
    return ctypes.WinDLL("user32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]


def ensure_dpi_awareness() -> None:
    """Make the process per-monitor DPI aware (first call only; later calls do nothing)."""
    global _aware
    if _aware or sys.platform != "win32":
        return
    _aware = True
    user32 = _user32()
    try:
        if user32.SetProcessDpiAwarenessContext(ctypes.c_void_p(_PER_MONITOR_AWARE_V2)):
            return
    except AttributeError:
        pass  # before Windows 10 1703
    try:
        shcore = ctypes.WinDLL("shcore")  # type: ignore[attr-defined,unused-ignore]
        shcore.SetProcessDpiAwareness(_PROCESS_PER_MONITOR_DPI_AWARE)
        return
    except (AttributeError, OSError):
        pass  # before Windows 8.1
    user32.SetProcessDPIAware()


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
    same by the executor (README, "Real screens")."""
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
