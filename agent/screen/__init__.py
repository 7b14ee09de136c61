"""The agent's view of the real screen: monitors, focus, active window (and capture).

- :mod:`agent.screen.geometry`: the monitors (screeninfo, mss as cross-check), the focused
  monitor, the active window title; numbered the same way on every agent.
- :mod:`agent.screen.x11` / :mod:`agent.screen.win32`: the platform calls behind them.
- :mod:`agent.screen.probe`: what a heartbeat reports (pluggable: real screen or simulated).
"""
