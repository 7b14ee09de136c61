"""The screen history's parameters, and what it records of each transition and judges
of the latest ones (screen_history.py says how they are used)."""

from __future__ import annotations

from dataclasses import dataclass

from actors.loop_detector.tile_masks import Mask


@dataclass(frozen=True, slots=True)
class HistoryParams:
    memory: int = 16
    """Transitions remembered per tile; at most 16 (a uint16 register per tile)."""
    block: int = 5
    """Block side in tiles (40 screen pixels at 1920x1080)."""
    hot_changes: int = 2
    """A block is hot when it changed at this many of the ``hot_window`` transitions before."""
    hot_window: int = 3
    big_fraction: float = 0.01
    """A change to new content over this fraction of the tiles is progress anyway."""
    big_min: int = 12
    ambient_reach: int = 1
    """Tiles around a place seen changing by itself that are ignored too (a second hand
    or a spinner moves a little between two captures)."""
    text_reach: int = 4
    """Where typing or a key acted, only the tiles this close to a place seen changing by
    itself are ignored (text does not move)."""
    wait_min: int = 16
    """During a wait, this many changed tiles outside the places that change by themselves
    are progress (a window or a message appeared)."""
    window_min: int = 16
    """After an input, this many tiles of new content in the window acted in, away from
    where it acted, are progress (a row added to a list below the button)."""
    steady_min: int = 2
    """Small new content in the window acted in is progress on tiles seen unchanged for
    this many transitions at least (action_answers.py ``label_changed``)."""
    trail_tint: int = 32
    """At the spots under the pointer's previous and new positions, a tile whose pixels
    moved by at most this many grey levels is the hover highlight following the pointer
    (a control's face tinted), not a mark drawn: below the faintest typed character
    (pixel.py), a tick or a selected row."""
    seen_level: int = 6
    """A tile shows a state an older frame of the ring showed when none of its reduced
    pixels differs from that frame by more than this."""


DEFAULT_HISTORY = HistoryParams()


@dataclass(frozen=True, slots=True)
class Transition:
    serial: int
    changed: Mask
    progress: bool
    at_site: int = -1
    """Tiles that changed where the action acted, -1 when no site was known (a wait)."""
    ignored: int = 0
    """Of those (or, in a wait, of all), the tiles ignored: places seen changing by
    themselves."""
    loose: Mask | None = None
    """In a wait: the tiles changed away from the places seen changing by themselves."""
    second_look: bool = False
    """A wait's progress taken back by the wait after it, or a renewal away from the
    window acted in taken back by the transition after it (screen_history.py)."""
    renewed_away: Mask | None = None
    """Progress only by new content entirely outside the window acted in: those tiles."""
    action: str = ""
    """The identity of the step's action (core.py's signature; ``wait`` for a wait)."""
    caused: Mask | None = None
    """Tiles away from the site that the action changed (action_answers.py)."""
    pending: Mask | None = None
    """Tiles away from the site with a small new content not yet explained."""


@dataclass(frozen=True, slots=True)
class Judgement:
    """Why the recent transitions are (not) progress."""

    static_run: int
    """Most recent transitions in a row without progress."""
    ignored_tiles: int
    """Tiles that changed during that run (each had changed before: clocks, carets...)."""
    at_site: int = 0
    """Of them, tiles where the actions acted (all ignored: seen changing by themselves)."""
    region: tuple[float, float, float, float] | None = None
    """The box around the changes ignored during the run, as fractions of the screen."""
