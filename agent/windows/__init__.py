"""The agent in a Windows session: a clean stop when its console closes or the session ends
(console_stop.py, session_end.py), and the pause window shown to the person at the
workstation (pause_notice.py, pause_window.py, pause_text.py, pause_win32.py;
docs/screens-and-pauses.md)."""
