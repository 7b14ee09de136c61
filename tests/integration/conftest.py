"""Fixtures of the integration tests that not every test run needs to import."""

from tests.win_desktop import win_desk  # noqa: F401 - the Windows desktop, two monitors
from tests.wine import agent_bundle, wine, wine_agent  # noqa: F401 - the Wine fixtures
