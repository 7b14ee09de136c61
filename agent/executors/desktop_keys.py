"""Keys and text for the desktop executor: key names, and how to type any text.

pyautogui types only the characters it has a key for (ASCII); anything else (``é``, ``ç``,
``€``, common in French patient records) it skips without a word. So text is split into
runs; a text with any untypeable run is pasted whole through the clipboard (pyperclip; on
Linux it needs xclip or xsel: desktop.py says why whole, and why the clipboard keeps it). If
the clipboard cannot be used, the action fails before anything is typed, rather than typing
half a name.
"""

from __future__ import annotations

from collections.abc import Collection
from itertools import groupby

KEY_ALIASES = {
    "control": "ctrl", "ctl": "ctrl", "return": "enter", "esc": "escape", "del": "delete",
    "ins": "insert", "pgup": "pageup", "pgdn": "pagedown", "windows": "win", "super": "win",
    "meta": "win", "cmd": "command", "opt": "option", "spacebar": "space", " ": "space",
    "arrowup": "up", "arrowdown": "down", "arrowleft": "left", "arrowright": "right",
}
MAX_KEYS = 8
MAX_TEXT = 10_000


class InputSpecError(ValueError):
    """A key name or a text the executor cannot type."""


def normalise_keys(keys: list[str], known: Collection[str]) -> list[str]:
    """pyautogui names for ``keys`` (case-insensitive, common aliases); raises on unknown."""
    if not 1 <= len(keys) <= MAX_KEYS:
        raise InputSpecError(f"key_combo needs 1..{MAX_KEYS} keys")
    out = []
    for key in keys:
        name = key if len(key) == 1 else key.strip().casefold()
        name = KEY_ALIASES.get(name, name)
        if len(name) == 1 and name.isalpha():
            name = name.lower()  # ctrl+A means the A key, not shift+a
        if name not in known:
            raise InputSpecError(f"unknown key {key!r}")
        out.append(name)
    return out


def typing_runs(text: str, typeable: Collection[str]) -> list[tuple[bool, str]]:
    """``[(typed, run), ...]``: consecutive characters grouped by whether a key types them."""
    if len(text) > MAX_TEXT:
        raise InputSpecError(f"text longer than {MAX_TEXT} characters")
    return [(typed, "".join(chars)) for typed, chars in groupby(text, lambda c: c in typeable)]
