"""The pause window on Windows: Win32 through ctypes (docs/screens-and-pauses.md).

The embeddable CPython the agent folder ships has no Tk, and user32 is on every Windows: the
window is plain Win32. It is what the person at the workstation cannot miss: topmost, brought
to the front and flashed in the taskbar (Windows refuses the foreground to a background
process; the flash is how it asks for attention then), a warning sound. The whole notice
(:func:`agent.windows.pause_text.notice_text`) is in a read-only multi-line EDIT control, which
wraps long lines and scrolls, so nothing is ever cut; the person may select and copy it.
"J'ai lu" or the close box ends the process; so does the agent when the pause ends.

Per-monitor DPI aware (agent.screen.win32): sized in physical pixels from the DPI of the
monitor it opens on, centred on the primary monitor's work area.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from agent.windows.pause_text import HEADLINE, TITLE, text_box_size

CLASS_NAME = "LeaPauseNotice"
BUTTON_ID, TEXT_ID = 1, 3
"""The button is IDOK: Enter presses it (IsDialogMessage); Escape (IDCANCEL) does nothing."""
MARGIN, GAP, BUTTON_SIZE = 12, 8, (110, 30)
FONT_POINTS = 10
"""Dialog sizes in pixels at 96 DPI (100 %), scaled by the monitor's DPI."""
SCREEN_SHARE = 0.9
"""At most this share of the work area: a longer text scrolls inside the EDIT control."""

WM_DESTROY, WM_CLOSE, WM_SETFONT, WM_COMMAND = 0x0002, 0x0010, 0x0030, 0x0111
WS_OVERLAPPED, WS_CAPTION, WS_SYSMENU, WS_VISIBLE, WS_CHILD = (
    0x00000000, 0x00C00000, 0x00080000, 0x10000000, 0x40000000)
WS_VSCROLL, WS_BORDER, WS_TABSTOP = 0x00200000, 0x00800000, 0x00010000
WS_EX_TOPMOST, WS_EX_DLGMODALFRAME = 0x00000008, 0x00000001
ES_MULTILINE, ES_READONLY, ES_AUTOVSCROLL = 0x0004, 0x0800, 0x0040
BS_DEFPUSHBUTTON, EM_SETLIMITTEXT = 0x0001, 0x00C5
SW_SHOW, SPI_GETWORKAREA, LOGPIXELSY = 5, 0x0030, 90
HWND_TOPMOST, SWP_NOMOVE, SWP_NOSIZE = -1, 0x0002, 0x0001
FLASHW_ALL, FLASHW_TIMERNOFG, MB_ICONEXCLAMATION = 0x3, 0xC, 0x30
FW_NORMAL, FW_BOLD, DEFAULT_CHARSET = 400, 700, 1
COLOR_BTNFACE, IDC_ARROW = 15, 32512


def crlf(text: str) -> str:
    """The EDIT control breaks lines at ``\\r\\n`` only."""
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


def layout(text: str, dpi: int, work: tuple[int, int, int, int], char_w: int, line_h: int
           ) -> dict[str, tuple[int, int, int, int]]:
    """Where the window and its controls go, ``(x, y, w, h)`` each, in physical pixels:
    the text box sized by :func:`text_box_size` in characters of the font, the window
    capped to :data:`SCREEN_SHARE` of ``work`` (the work area: left, top, right, bottom)
    and centred there. The ``window`` entry is the client size before the frame is added."""
    scale = dpi / 96
    margin, gap = round(MARGIN * scale), round(GAP * scale)
    button_w, button_h = (round(v * scale) for v in BUTTON_SIZE)
    cols, rows, _ = text_box_size(text)
    scrollbar = round(20 * scale)
    text_w = cols * char_w + scrollbar + 2 * gap
    text_h = (rows + 1) * line_h
    head_h = line_h + gap
    work_w, work_h = work[2] - work[0], work[3] - work[1]
    client_w = min(text_w + 2 * margin, int(work_w * SCREEN_SHARE))
    fixed_h = 2 * margin + head_h + gap + button_h + gap
    client_h = min(fixed_h + text_h, int(work_h * SCREEN_SHARE))
    text_h = client_h - fixed_h
    inner_w = client_w - 2 * margin
    return {
        "window": (work[0] + (work_w - client_w) // 2, work[1] + (work_h - client_h) // 2,
                   client_w, client_h),
        "headline": (margin, margin, inner_w, head_h),
        "text": (margin, margin + head_h + gap, inner_w, text_h),
        "button": (client_w - margin - button_w, client_h - margin - button_h,
                   button_w, button_h),
    }


_job: list[Any] = []  # this process's job object, created once, open until it ends


def end_with_this_process(pid: int) -> None:
    """Windows: process ``pid`` (a pause window) ends when this one ends, however it ends
    (kill included): a job object that kills its processes when its last handle closes.
    Otherwise a window outlives a crashed agent, and the restarted agent, told the pause
    again, opens a second one."""
    if sys.platform != "win32":
        raise OSError("job objects are Windows'")
    from ctypes import wintypes

    class Basic(ctypes.Structure):
        _fields_ = [("PerProcessUserTimeLimit", ctypes.c_int64),
                    ("PerJobUserTimeLimit", ctypes.c_int64), ("LimitFlags", wintypes.DWORD),
                    ("MinimumWorkingSetSize", ctypes.c_size_t),
                    ("MaximumWorkingSetSize", ctypes.c_size_t),
                    ("ActiveProcessLimit", wintypes.DWORD), ("Affinity", ctypes.c_size_t),
                    ("PriorityClass", wintypes.DWORD), ("SchedulingClass", wintypes.DWORD)]

    class Extended(ctypes.Structure):
        _fields_ = [("BasicLimitInformation", Basic), ("IoInfo", ctypes.c_uint64 * 6),
                    ("ProcessMemoryLimit", ctypes.c_size_t),
                    ("JobMemoryLimit", ctypes.c_size_t),
                    ("PeakProcessMemoryUsed", ctypes.c_size_t),
                    ("PeakJobMemoryUsed", ctypes.c_size_t)]

    k: Any = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]
    k.CreateJobObjectW.restype = k.OpenProcess.restype = ctypes.c_void_p
    k.SetInformationJobObject.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                          wintypes.DWORD]
    k.AssignProcessToJobObject.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    k.CloseHandle.argtypes = [ctypes.c_void_p]
    if not _job:
        job = k.CreateJobObjectW(None, None)
        limits = Extended()
        limits.BasicLimitInformation.LimitFlags = 0x2000  # KILL_ON_JOB_CLOSE
        if not job or not k.SetInformationJobObject(job, 9, ctypes.byref(limits),
                                                    ctypes.sizeof(limits)):
            raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined,unused-ignore]
        _job.append(job)
    process = k.OpenProcess(0x0101, False, pid)  # PROCESS_TERMINATE | PROCESS_SET_QUOTA
    if not process:
        raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined,unused-ignore]
    try:
        if not k.AssignProcessToJobObject(_job[0], process):
            raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined,unused-ignore]
    finally:
        k.CloseHandle(process)


def show(text: str) -> int:
    """Show ``text`` until the person closes the window or the process is ended; 0."""
    if sys.platform != "win32":
        raise OSError("the Win32 pause window needs Windows")
    from agent.screen.win32 import ensure_dpi_awareness

    ensure_dpi_awareness()
    window = _Window(text)
    print(f"shown {window.hwnd}", flush=True)
    window.loop()
    return 0


class _Window:
    """One pause window and its message loop (Windows only: built by :func:`show`)."""

    def __init__(self, text: str) -> None:
        from ctypes import wintypes

        self.user32: Any = ctypes.WinDLL("user32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]
        self.gdi32: Any = ctypes.WinDLL("gdi32")  # type: ignore[attr-defined,unused-ignore]
        kernel32: Any = ctypes.WinDLL("kernel32")  # type: ignore[attr-defined,unused-ignore]
        u, g = self.user32, self.gdi32
        lresult = ctypes.c_ssize_t
        wndproc_type = ctypes.WINFUNCTYPE(  # type: ignore[attr-defined,unused-ignore]
            lresult, wintypes.HWND, wintypes.UINT, wintypes.WPARAM, wintypes.LPARAM)

        class WNDCLASSW(ctypes.Structure):
            _fields_ = [("style", wintypes.UINT), ("lpfnWndProc", wndproc_type),
                        ("cbClsExtra", ctypes.c_int), ("cbWndExtra", ctypes.c_int),
                        ("hInstance", wintypes.HINSTANCE), ("hIcon", wintypes.HICON),
                        ("hCursor", wintypes.HANDLE), ("hbrBackground", wintypes.HBRUSH),
                        ("lpszMenuName", wintypes.LPCWSTR), ("lpszClassName", wintypes.LPCWSTR)]

        h, p = wintypes.HWND, ctypes.c_void_p
        for name in ("DefWindowProcW", "SendMessageW"):
            getattr(u, name).argtypes = [h, wintypes.UINT, wintypes.WPARAM, wintypes.LPARAM]
            getattr(u, name).restype = lresult
        u.CreateWindowExW.argtypes = [wintypes.DWORD, wintypes.LPCWSTR, wintypes.LPCWSTR,
                                      wintypes.DWORD, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_int, ctypes.c_int, h, p, p, p]
        u.CreateWindowExW.restype = h
        for name in ("ShowWindow", "SetForegroundWindow", "SetFocus", "DestroyWindow",
                     "SetWindowTextW", "IsDialogMessageW"):
            getattr(u, name).argtypes = {"ShowWindow": [h, ctypes.c_int],
                                         "SetWindowTextW": [h, wintypes.LPCWSTR],
                                         "IsDialogMessageW": [h, p]}.get(name, [h])
        u.GetMessageW.argtypes = [p, h, wintypes.UINT, wintypes.UINT]
        u.AdjustWindowRectEx.argtypes = [p, wintypes.DWORD, wintypes.BOOL, wintypes.DWORD]
        u.SetWindowPos.argtypes = [h, h, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                   ctypes.c_int, wintypes.UINT]
        u.LoadCursorW.argtypes = [p, p]
        u.LoadCursorW.restype = wintypes.HANDLE
        u.GetSysColorBrush.restype = wintypes.HBRUSH
        u.GetDC.restype = wintypes.HDC
        u.ReleaseDC.argtypes = [h, wintypes.HDC]
        g.CreateFontW.restype = wintypes.HFONT
        g.SelectObject.argtypes = [wintypes.HDC, wintypes.HGDIOBJ]
        g.SelectObject.restype = wintypes.HGDIOBJ
        g.GetTextMetricsW.argtypes = [wintypes.HDC, p]
        g.GetDeviceCaps.argtypes = [wintypes.HDC, ctypes.c_int]
        kernel32.GetModuleHandleW.restype = wintypes.HMODULE

        self.proc = wndproc_type(self._wndproc)  # kept alive: Windows calls it back
        instance = kernel32.GetModuleHandleW(None)
        cls = WNDCLASSW(lpfnWndProc=self.proc, hInstance=instance,
                        hCursor=u.LoadCursorW(None, ctypes.c_void_p(IDC_ARROW)),
                        hbrBackground=u.GetSysColorBrush(COLOR_BTNFACE),
                        lpszClassName=CLASS_NAME)
        if not u.RegisterClassW(ctypes.byref(cls)):
            raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined,unused-ignore]

        screen = u.GetDC(None)
        dpi = g.GetDeviceCaps(screen, LOGPIXELSY) or 96
        height = -round(FONT_POINTS * dpi / 72)
        font = g.CreateFontW(height, 0, 0, 0, FW_NORMAL, 0, 0, 0, DEFAULT_CHARSET, 0, 0, 0, 0,
                             "Segoe UI")
        bold = g.CreateFontW(height, 0, 0, 0, FW_BOLD, 0, 0, 0, DEFAULT_CHARSET, 0, 0, 0, 0,
                             "Segoe UI")
        metrics = (ctypes.c_long * 16)()  # TEXTMETRICW: tmHeight [0], tmAveCharWidth [5]
        g.SelectObject(screen, font)
        g.GetTextMetricsW(screen, metrics)
        u.ReleaseDC(None, screen)
        work = wintypes.RECT()
        u.SystemParametersInfoW(SPI_GETWORKAREA, 0, ctypes.byref(work), 0)
        text = crlf(text)
        places = layout(text, dpi, (work.left, work.top, work.right, work.bottom),
                        max(1, metrics[5]), max(1, metrics[0]))

        style = WS_OVERLAPPED | WS_CAPTION | WS_SYSMENU
        frame = wintypes.RECT(0, 0, places["window"][2], places["window"][3])
        u.AdjustWindowRectEx(ctypes.byref(frame), style, False, WS_EX_DLGMODALFRAME)
        x, y, _, _ = places["window"]
        self.hwnd = u.CreateWindowExW(WS_EX_TOPMOST | WS_EX_DLGMODALFRAME, CLASS_NAME, TITLE,
                                      style, x, y, frame.right - frame.left,
                                      frame.bottom - frame.top, None, None, instance, None)
        if not self.hwnd:
            raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined,unused-ignore]

        def child(kind: str, label: str, flags: int, ident: int, where: str, face: int) -> Any:
            cx, cy, cw, ch = places[where]
            made = u.CreateWindowExW(0, kind, label, WS_CHILD | WS_VISIBLE | flags, cx, cy, cw,
                                     ch, self.hwnd, ctypes.c_void_p(ident), instance, None)
            u.SendMessageW(made, WM_SETFONT, face, 1)
            return made

        child("STATIC", HEADLINE, 0, 0, "headline", bold)
        edit = child("EDIT", "", ES_MULTILINE | ES_READONLY | ES_AUTOVSCROLL | WS_VSCROLL
                     | WS_BORDER | WS_TABSTOP, TEXT_ID, "text", font)
        u.SendMessageW(edit, EM_SETLIMITTEXT, 0, 0)  # no cap: the whole text, however long
        u.SetWindowTextW(edit, text)
        button = child("BUTTON", "J'ai lu", BS_DEFPUSHBUTTON | WS_TABSTOP, BUTTON_ID, "button",
                       font)
        u.ShowWindow(self.hwnd, SW_SHOW)
        u.SetWindowPos(self.hwnd, h(HWND_TOPMOST), 0, 0, 0, 0, SWP_NOMOVE | SWP_NOSIZE)
        u.SetForegroundWindow(self.hwnd)
        u.SetFocus(button)
        self._attention(wintypes)

    def _attention(self, wintypes: Any) -> None:
        """Flash the taskbar button until the window is in front, and beep once."""
        class FLASHWINFO(ctypes.Structure):
            _fields_ = [("cbSize", wintypes.UINT), ("hwnd", wintypes.HWND),
                        ("dwFlags", wintypes.DWORD), ("uCount", wintypes.UINT),
                        ("dwTimeout", wintypes.DWORD)]

        info = FLASHWINFO(ctypes.sizeof(FLASHWINFO), self.hwnd, FLASHW_ALL | FLASHW_TIMERNOFG,
                          0, 0)
        self.user32.FlashWindowEx(ctypes.byref(info))
        self.user32.MessageBeep(MB_ICONEXCLAMATION)

    def _wndproc(self, hwnd: Any, msg: int, wparam: int, lparam: int) -> int:
        u = self.user32
        if msg == WM_COMMAND and (wparam & 0xFFFF) == BUTTON_ID:
            u.DestroyWindow(hwnd)
            return 0
        if msg == WM_DESTROY:
            u.PostQuitMessage(0)
            return 0
        return int(u.DefWindowProcW(hwnd, msg, wparam, lparam))

    def loop(self) -> None:
        msg = (ctypes.c_byte * 64)()  # MSG: 48 bytes on x64
        while self.user32.GetMessageW(ctypes.byref(msg), None, 0, 0) > 0:
            if not self.user32.IsDialogMessageW(self.hwnd, ctypes.byref(msg)):
                self.user32.TranslateMessage(ctypes.byref(msg))
                self.user32.DispatchMessageW(ctypes.byref(msg))
