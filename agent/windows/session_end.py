"""Windows: the agent stops cleanly at log-off and shutdown, through a hidden window.

A process that has loaded user32 or gdi32 (the desktop executor does; so does this module) is
a *Windows application* to the system: its console handler (agent/windows/console_stop.py) is no
longer called for CTRL_LOGOFF_EVENT and CTRL_SHUTDOWN_EVENT. What Windows sends instead is
WM_QUERYENDSESSION then WM_ENDSESSION, to every top-level window, and the process may be
ended as soon as WM_ENDSESSION has been answered (docs/windows-stop.md, with the sources).
So the agent owns one hidden top-level window, on its own thread with its own message loop:

- WM_QUERYENDSESSION: answered TRUE (the agent never blocks a log-off; what it is doing is
  recorded in its ledger first);
- WM_ENDSESSION with wParam TRUE (the session does end): ask the agent to stop, then wait
  until its main loop has finished (the action in progress finished, or abandoned after the
  grace and reported ``indeterminate_after_restart`` at the next start; the ledger closed)
  before answering.

Not a message-only window (``HWND_MESSAGE``): those receive no broadcast, and the end-session
messages are one. The window is never shown, so it never takes the foreground nor input.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable
from typing import Any

WM_DESTROY, WM_CLOSE = 0x0002, 0x0010
WM_QUERYENDSESSION, WM_ENDSESSION = 0x0011, 0x0016
ENDSESSION_LOGOFF = 0x80000000
CLASS_NAME = "LeaAgentSessionEnd"
WINDOW_TITLE = "Léa agent (session end)"


def reason_of(lparam: int) -> str:
    """What ends: ``log-off`` when lParam has ENDSESSION_LOGOFF, else ``shutdown``."""
    return "log-off" if lparam & ENDSESSION_LOGOFF else "shutdown"


class SessionEnd:
    """``install()`` on Windows (a no-op elsewhere); ``stopped()`` once the agent is done.

    ``request_stop(reason)`` is called on the window's thread: it must only set a flag and
    wake the main loop. ``wait_s`` bounds the wait in WM_ENDSESSION.
    """

    def __init__(self, request_stop: Callable[[str], None], wait_s: float) -> None:
        self._request_stop = request_stop
        self._wait_s = wait_s
        self._done = threading.Event()
        self._ready = threading.Event()
        self._hwnd: int | None = None
        self._thread: threading.Thread | None = None
        self._proc: Any = None  # the ctypes WNDPROC: kept alive while the window lives
        self.error: str | None = None

    def install(self, timeout_s: float = 10.0) -> bool:
        """Create the window on its own thread; False when not on Windows or it failed
        (``error`` says why)."""
        if sys.platform != "win32":
            return False
        self._thread = threading.Thread(target=self._run, name="session-end", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            self.error = "the session-end window was not created in time"
        return self._hwnd is not None

    def stopped(self) -> None:
        """The agent has stopped: a waiting WM_ENDSESSION may return, the window closes."""
        self._done.set()
        if sys.platform != "win32" or self._hwnd is None:
            return
        from ctypes import wintypes

        user32 = ctypes.WinDLL("user32", use_last_error=True)
        user32.PostMessageW.argtypes = [wintypes.HWND, wintypes.UINT, wintypes.WPARAM,
                                        wintypes.LPARAM]
        user32.PostMessageW(self._hwnd, WM_CLOSE, 0, 0)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self._wait_s)

    def _on_message(self, msg: int, wparam: int, lparam: int) -> int | None:
        """The answer to an end-session message, None for any other (DefWindowProc)."""
        if msg == WM_QUERYENDSESSION:
            return 1
        if msg == WM_ENDSESSION:
            if wparam:
                self._request_stop(reason_of(lparam))
                self._done.wait(self._wait_s)
            return 0
        return None

    def _run(self) -> None:
        if sys.platform != "win32":
            return
        from ctypes import wintypes

        lresult = ctypes.c_ssize_t
        wndproc = ctypes.WINFUNCTYPE(lresult, wintypes.HWND, wintypes.UINT, wintypes.WPARAM,
                                     wintypes.LPARAM)

        class WNDCLASSW(ctypes.Structure):
            _fields_ = [("style", wintypes.UINT), ("lpfnWndProc", wndproc),
                        ("cbClsExtra", ctypes.c_int), ("cbWndExtra", ctypes.c_int),
                        ("hInstance", wintypes.HINSTANCE), ("hIcon", wintypes.HICON),
                        ("hCursor", wintypes.HANDLE), ("hbrBackground", wintypes.HBRUSH),
                        ("lpszMenuName", wintypes.LPCWSTR),
                        ("lpszClassName", wintypes.LPCWSTR)]

        user32 = ctypes.WinDLL("user32", use_last_error=True)
        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        user32.DefWindowProcW.argtypes = [wintypes.HWND, wintypes.UINT, wintypes.WPARAM,
                                          wintypes.LPARAM]
        user32.DefWindowProcW.restype = lresult
        user32.CreateWindowExW.argtypes = [
            wintypes.DWORD, wintypes.LPCWSTR, wintypes.LPCWSTR, wintypes.DWORD, ctypes.c_int,
            ctypes.c_int, ctypes.c_int, ctypes.c_int, wintypes.HWND, wintypes.HMENU,
            wintypes.HINSTANCE, wintypes.LPVOID]
        user32.CreateWindowExW.restype = wintypes.HWND
        user32.RegisterClassW.argtypes = [ctypes.POINTER(WNDCLASSW)]
        user32.RegisterClassW.restype = wintypes.ATOM
        user32.GetMessageW.argtypes = [ctypes.POINTER(wintypes.MSG), wintypes.HWND,
                                       wintypes.UINT, wintypes.UINT]
        user32.GetMessageW.restype = wintypes.BOOL
        user32.DispatchMessageW.argtypes = [ctypes.POINTER(wintypes.MSG)]
        user32.DispatchMessageW.restype = lresult
        kernel32.GetModuleHandleW.argtypes = [wintypes.LPCWSTR]
        kernel32.GetModuleHandleW.restype = wintypes.HMODULE

        def proc(hwnd: int, msg: int, wparam: int, lparam: int) -> int:
            try:
                answer = self._on_message(msg, wparam, lparam)
            except Exception:  # a callback must not raise into user32
                answer = 0 if msg == WM_ENDSESSION else None
            if answer is not None:
                return answer
            if msg == WM_DESTROY:
                user32.PostQuitMessage(0)
                return 0
            return int(user32.DefWindowProcW(hwnd, msg, wparam, lparam))

        self._proc = wndproc(proc)
        instance = kernel32.GetModuleHandleW(None)
        wc = WNDCLASSW(lpfnWndProc=self._proc, hInstance=instance,
                       lpszClassName=CLASS_NAME)
        if not user32.RegisterClassW(ctypes.byref(wc)):
            self.error = f"RegisterClassW failed (error {ctypes.get_last_error()})"
            self._ready.set()
            return
        # dwExStyle 0 and no WS_VISIBLE: a hidden top-level window (no parent, not
        # HWND_MESSAGE), which the end-session broadcast reaches.
        hwnd = user32.CreateWindowExW(0, CLASS_NAME, WINDOW_TITLE, 0, 0, 0, 0, 0, None, None,
                                      instance, None)
        if not hwnd:
            self.error = f"CreateWindowExW failed (error {ctypes.get_last_error()})"
            self._ready.set()
            return
        self._hwnd = hwnd
        self._ready.set()
        msg = wintypes.MSG()
        while user32.GetMessageW(ctypes.byref(msg), None, 0, 0) > 0:
            user32.DispatchMessageW(ctypes.byref(msg))
