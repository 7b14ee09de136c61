"""The Windows setup chain: open an application through the Start menu, guarded
(docs/screens-and-pauses.md).

Before a recorded workflow replays, the application it needs is opened the way a person
would: Start menu, search, type the name, click the result. Each transition is guarded by
a ``verify_screen`` on the active window's title (French and English Windows titles), so a
click that opened something else (the notification-area overflow instead of Start, say)
stops the chain before anything is typed into the wrong place, and the human-correction
mode takes over (agent/executors/window_guard.py).

``click_then_type`` (12 steps)::

    1 click_start_menu        2 wait_start_menu 1000 ms   3 verify_start_menu_open (guard 1)
    4 click_search_box        5 wait_search_ready 500 ms  6 verify_search_box_active (guard 2)
    7 type_app_name           8 wait_search_results 1200  9 verify_search_results_visible (3)
    10 click_app_result      11 wait_app_launch 2000 ms  12 verify_app_launched (final)

``direct_typing`` leaves out 4 and 6 (typing goes straight into the Start menu search).
The final check exists only when the application's window title is known. Every step
carries ``parameters._setup_phase``: its clicks are not judged by a screen change, the
guards decide. Guards wait at most 2 s for their title.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from messages.workflow import Action, Workflow

SearchMode = Literal["click_then_type", "direct_typing"]

START_MENU_TITLES = ("Rechercher", "Search", "Cortana", "Démarrer", "Start", "SearchHost",
                     "StartMenuExperienceHost")
SEARCH_BOX_TITLES = ("Rechercher", "Search")
SEARCH_RESULTS_TITLES = ("Rechercher", "Search", "Cortana", "SearchHost",
                         "StartMenuExperienceHost")
GUARD_TIMEOUT_MS = 1500
FINAL_GUARD_TIMEOUT_MS = 2000
MAX_GUARD_TIMEOUT_MS = 2000
LAUNCH_WAIT_MS = 2000
OFFICE_LAUNCH_WAIT_MS = 3000
OFFICE_APPS = ("word", "excel", "powerpoint", "outlook", "onenote", "access", "publisher")

KNOWN_TITLES: dict[str, tuple[str, ...]] = {
    "bloc-notes": ("Bloc-notes", "Notepad"), "notepad": ("Bloc-notes", "Notepad"),
    "calculatrice": ("Calculatrice", "Calculator"), "calculator": ("Calculatrice", "Calculator"),
    "paint": ("Paint",), "word": ("Word",), "excel": ("Excel",),
}
"""Window titles (French, English) of applications the setup chain often opens."""


@dataclass(frozen=True)
class Targets:
    """Where to click, as a recorded workflow would say it: x_pct/y_pct of the monitor, and
    optionally an anchor image (base64 PNG) tried first. Defaults: Windows 10 at 100 %."""

    start_menu: dict[str, Any] = field(default_factory=lambda: {"x_pct": 0.012, "y_pct": 0.985})
    search_box: dict[str, Any] = field(default_factory=lambda: {"x_pct": 0.12, "y_pct": 0.985})
    app_result: dict[str, Any] = field(default_factory=lambda: {"x_pct": 0.1, "y_pct": 0.3})


def _target(spec: dict[str, Any], description: str) -> dict[str, Any]:
    out = {"vlm_description": description, **spec}
    if out.get("anchor_image_base64") and not out.get("resolve_order"):
        out["resolve_order"] = ["template", "position"]  # "clic visuel, fallback x/y"
    return out


def _guard(patterns: tuple[str, ...] | list[str], timeout_ms: int) -> dict[str, Any]:
    return {"expected_window_title_contains": list(patterns),
            "timeout_ms": min(timeout_ms, MAX_GUARD_TIMEOUT_MS), "_setup_phase": True}


def setup_actions(app_name: str, search_mode: SearchMode = "click_then_type",
                  source_window_title: str | None = None,
                  app_window_titles: list[str] | None = None,
                  targets: Targets | None = None, prefix: str = "act_setup",
                  monitor_index: int | None = None, language: Literal["fr", "en"] = "fr",
                  ) -> list[Action]:
    """The chain that opens ``app_name`` (module docstring).

    ``source_window_title``: the search window's title as the recorded session saw it (guard
    2 accepts it besides Rechercher / Search). ``app_window_titles``: the application
    window's title patterns for the final check (default: :data:`KNOWN_TITLES`, else none
    and no final check). ``language`` picks the search window title that
    ``click_app_result`` expects in front.
    """
    if not app_name.strip():
        raise ValueError("app_name is empty")
    if search_mode not in ("click_then_type", "direct_typing"):
        raise ValueError(f"unknown search_mode {search_mode!r}")
    targets = targets or Targets()
    titles = app_window_titles if app_window_titles is not None else \
        list(KNOWN_TITLES.get(app_name.strip().casefold(), ()))
    office = app_name.strip().casefold() in OFFICE_APPS
    box_titles = [source_window_title] if source_window_title else []
    box_titles += [t for t in SEARCH_BOX_TITLES if t not in box_titles]
    search_title = "Rechercher" if language == "fr" else "Search"
    steps: list[dict[str, Any]] = [
        {"name": "click_start_menu", "type": "click",
         "target_spec": _target(targets.start_menu, "Windows Start button")},
        {"name": "wait_start_menu", "type": "wait", "parameters": {"duration_ms": 1000}},
        {"name": "verify_start_menu_open", "type": "verify_screen",
         "parameters": _guard(START_MENU_TITLES, GUARD_TIMEOUT_MS)},
    ]
    if search_mode == "click_then_type":
        steps.append({"name": "click_search_box", "type": "click",
                      "target_spec": _target(targets.search_box, "Start menu search box")})
    steps.append({"name": "wait_search_ready", "type": "wait",
                  "parameters": {"duration_ms": 500}})
    if search_mode == "click_then_type":
        steps.append({"name": "verify_search_box_active", "type": "verify_screen",
                      "parameters": _guard(box_titles, GUARD_TIMEOUT_MS)})
    steps += [
        {"name": "type_app_name", "type": "type", "parameters": {"text": app_name}},
        {"name": "wait_search_results", "type": "wait", "parameters": {"duration_ms": 1200}},
        {"name": "verify_search_results_visible", "type": "verify_screen",
         "parameters": _guard(SEARCH_RESULTS_TITLES, GUARD_TIMEOUT_MS)},
        {"name": "click_app_result", "type": "click", "expected_window_before": search_title,
         "target_spec": _target(targets.app_result, f"search result {app_name}")},
        {"name": "wait_app_launch", "type": "wait",
         "parameters": {"duration_ms": OFFICE_LAUNCH_WAIT_MS if office else LAUNCH_WAIT_MS}},
    ]
    if titles:
        steps.append({"name": "verify_app_launched", "type": "verify_screen",
                      "parameters": _guard(titles, FINAL_GUARD_TIMEOUT_MS)})
    actions = []
    for step in steps:
        name = step.pop("name")
        params = {**step.pop("parameters", {}), "_setup_phase": True}
        actions.append(Action.model_validate({
            "action_id": f"{prefix}_{name}", "parameters": params,
            "intention": f"setup: {name.replace('_', ' ')}", "monitor_index": monitor_index,
            **step}))
    return actions


def with_setup(workflow: Workflow) -> Workflow:
    """``workflow`` with its setup chain in front of its actions (none without ``setup``).

    Raises ValueError (a pydantic ValidationError) if a generated id is taken by one of
    the workflow's own steps.
    """
    spec = workflow.setup
    if spec is None:
        return workflow
    chain = setup_actions(spec.app_name, spec.search_mode, spec.source_window_title,
                          spec.app_window_titles, monitor_index=spec.monitor_index,
                          language=spec.language)
    # Validated anew: ids stay unique across the chain and the workflow's own steps.
    return Workflow.model_validate({
        **workflow.model_dump(mode="json", exclude={"setup", "actions"}),
        "actions": [a.model_dump(mode="json") for a in (*chain, *workflow.actions)]})
