#!/usr/bin/env python3
"""Record the loop detector's real-application set under Xvfb (tests/data/loop_real/).

Real programs (xclock analog and digital, xterm running ``top``, xeyes, xcalc, xedit,
mousepad, and a Tk form with an in-app clock and spinner: form_app.py) on a 1920x1080
display with openbox, driven by xdotool. Each step is recorded as the desktop agent would
report it (agent/executors/desktop.py): the screen before, the input, the screen after
(polled until it changes, up to the agent's timeout), both encoded by the agent's own
``encode_screenshot`` (1280-wide JPEG, quality 70); the point clicked, the foreground
window and the focus rectangle (agent.screen.geometry, as fractions of the screen).

Labels come from the applications' own state, never from the pixels: the form writes its
state to a file (form_app.py), a terminal its output (xterm's log). A step that left the
state unchanged is stuck; a sequence is *stuck from* the first step after which the state
never changes again, *progress* if it changed at every step.

    python bench/loop_real/record.py [--out tests/data/loop_real] [--only NAME]
    python bench/loop_real/record.py --part tuning|held-out-2|held-out-3|held-out-4  # the sheet
    python bench/loop_real/record.py --part held-out-5  # the form, journal and xterm again
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agent.executors.desktop_config import DesktopConfig  # noqa: E402
from agent.executors.desktop_frames import (  # noqa: E402
    action_site,
    encode_screenshot,
    screen_changed,
)
from tests.xdisplay import XDisplay, start_xdisplay  # noqa: E402

W, H = 1920, 1080
AREA = (0, 0, W, H)
FORM = (120, 120)  # the form's top-left corner on screen
CONFIG = DesktopConfig()
WAIT_S = 1.0

# Where the form's controls are (form_app.py's grid at FORM; measured on this display).
NAME_FIELD = (530, 158)
LOCKED_FIELD = (530, 195)
LIST_ROW0 = (250, 232)
LIST_ROW_H = 21
PLUS = (160, 373)
CHECK = (380, 373)
VALIDATE = (198, 415)
OPEN = (436, 415)
EMPTY = (650, 300)


def xdo(display: str, *args: str) -> None:
    subprocess.run(["xdotool", *args], env={**os.environ, "DISPLAY": display}, check=True,
                   timeout=20)


@dataclass
class Step:
    kind: str  # click | type | key | scroll | wait
    point: tuple[int, int] | None = None
    text: str = ""
    keys: str = ""
    delta: int = 0
    widget: str = ""
    """A control of the application, placed where it reports it (journal_app.py)."""


@dataclass
class Scenario:
    name: str
    steps: list[Step]
    app: str = "form"  # form | journal | fiche | web | xterm | xterm_noecho
    focus_first: tuple[int, int] | None = NAME_FIELD
    back_is_stuck: bool = False
    """A step that brings the state back to one the sequence already had changed nothing
    (a character typed then erased)."""


@dataclass
class Noise:
    name: str
    programs: list[list[str]] = field(default_factory=list)
    in_app: str = ""
    place: tuple[int, int] = FORM
    """The top-left corner of the application acted in (the form, journal or sheet)."""
    scale: float = 1.0
    """The sheet's size: its fonts (Tk) or its page (Chromium) scaled by this."""


NOISES = [
    Noise("quiet"),
    Noise("xclock_analog", [["xclock", "-update", "1", "-geometry", "220x220+1300+80"]]),
    Noise("xclock_digital", [["xclock", "-digital", "-strftime", "%H:%M:%S", "-update", "1",
                              "-geometry", "+1300+80"]]),
    Noise("top", [["xterm", "-geometry", "90x30+1000+420", "-e", "top", "-d", "0.5"]]),
    Noise("app_clock", in_app="clock"),
    Noise("app_analog_spinner", in_app="analog,spinner"),
    Noise("xeyes", [["xeyes", "-geometry", "200x150+1000+100"]]),
    Noise("desk", [["xcalc", "-geometry", "+1400+500"], ["xedit", "-geometry", "500x300+900+80"],
                   ["mousepad"]]),
    Noise("busy", [["xclock", "-update", "1", "-geometry", "220x220+1300+80"],
                   ["xterm", "-geometry", "90x30+1000+420", "-e", "top", "-d", "0.5"]],
          in_app="spinner"),
]


def click(p: tuple[int, int]) -> Step:
    return Step("click", p)


def row(i: int) -> tuple[int, int]:
    return LIST_ROW0[0], LIST_ROW0[1] + i * LIST_ROW_H


SCENARIOS = [
    # progress: the form's state changes at every step
    Scenario("type_name", [Step("type", NAME_FIELD, text=t)
                           for t in ("Du", "po", "nt", " J", "ea", "n-", "Pa")]),
    Scenario("type_then_delete", [Step("type", NAME_FIELD, text=t) for t in ("Mar", "tin", "ez")]
             + [Step("key", keys="BackSpace") for _ in range(4)]),
    Scenario("plus_counter", [click(PLUS) for _ in range(7)]),
    Scenario("list_select", [click(row(i)) for i in (0, 1, 2, 3, 4, 5, 2)]),
    Scenario("check_toggle", [click(CHECK) for _ in range(6)]),
    Scenario("dialog_flow", [click(OPEN), Step("type", None, text="RAS"),
                             Step("type", None, text=" ok"), Step("key", keys="BackSpace"),
                             Step("type", None, text="!"), Step("key", keys="Tab"),
                             Step("key", keys="space")]),
    Scenario("scroll_list", [Step("scroll", row(2), delta=-1) for _ in range(7)]),
    # stuck: from some step on, nothing the application holds changes
    Scenario("noop_button", [click(VALIDATE) for _ in range(7)]),
    Scenario("type_then_noop", [Step("type", NAME_FIELD, text=t) for t in ("Lu", "ci", "e")]
             + [click(VALIDATE) for _ in range(5)]),
    Scenario("disabled_field", [Step("type", LOCKED_FIELD, text=t)
                                for t in ("ab", "cd", "ef", "gh", "ij", "kl")],
             focus_first=EMPTY),
    Scenario("scroll_end", [Step("scroll", row(2), delta=-4) for _ in range(9)]),
    Scenario("wait_dialog", [click(VALIDATE)] + [Step("wait") for _ in range(6)]),
    Scenario("hover_noop", [click(PLUS), click(PLUS)] + [click(VALIDATE) for _ in range(5)]),
    Scenario("key_noop", [Step("type", NAME_FIELD, text="Ana")]
             + [Step("key", keys="ctrl+F12") for _ in range(6)]),
    Scenario("click_empty", [click(row(1)), click(row(3))] + [click(EMPTY) for _ in range(5)]),
    # a terminal (the buffer is xterm's log): echoing, then not echoing
    Scenario("xterm_typing", [Step("type", None, text=t)
                              for t in ("ls", " -l", " /", "tmp", " |", " wc")],
             app="xterm", focus_first=None),
    Scenario("xterm_noecho", [Step("type", None, text=t)
                              for t in ("ab", "cd", "ef", "gh", "ij", "kl")],
             app="xterm_noecho", focus_first=None),
]


def on(widget: str, text: str = "", kind: str = "click") -> Step:
    return Step(kind, None, text=text, widget=widget)


ADD, REFRESH, PRINT, HELP = "Ajouter une ligne", "Actualiser", "Imprimer", "Aide"

JOURNAL_SCENARIOS = [
    # progress shown away from the click: each press adds a row far below the toolbar
    Scenario("add_rows", [on(ADD) for _ in range(7)], app="journal", focus_first=None,
             back_is_stuck=True),
    # stuck: a character typed, then erased, again and again
    Scenario("type_erase", [on("note", "Re", "type")]
             + [s for _ in range(3) for s in (on("note", "x", "type"),
                                              Step("key", keys="BackSpace"))],
             app="journal", focus_first=None, back_is_stuck=True),
    # stuck: buttons that do nothing, the pointer moving between them (hover highlights)
    Scenario("hover_toolbar", [on(b) for b in (REFRESH, PRINT, HELP) * 2 + (REFRESH,)],
             app="journal", focus_first=None, back_is_stuck=True),
]
"""Recorded beside these noises: two in each part of the split (dataset.py)."""
JOURNAL_NOISES = ("quiet", "top", "app_analog_spinner", "xeyes", "busy", "app_clock")


VALIDER, OPEN_SHEET, ACTIONS, NEXT = "Valider", "Ouvrir", "Actions", "Vue suivante"


def fiche_scenarios(app: str) -> list[Scenario]:
    """The patient sheet's scenarios (fiche_app.py in Tk, web_app.py in Chromium)."""

    def sc(name: str, steps: list[Step]) -> Scenario:
        return Scenario(f"{app}_{name}", steps, app=app, focus_first=None, back_is_stuck=True)

    escape = Step("key", keys="Escape")
    return [
        # progress
        sc("add_rows", [on(ADD) for _ in range(7)]),
        sc("save_count", [on("note", "Pansement", "type")] + [on(VALIDER) for _ in range(6)]),
        sc("menu_next", [s for _ in range(3) for s in (on(ACTIONS), on(NEXT))]),
        sc("type_note", [on("note", t, "type") for t in ("Pan", "sem", "ent", " fa", "it")]
           + [Step("type", None, text=t) for t in (" ce", " ma", "tin")]),
        sc("dialog_fill", [on(OPEN_SHEET)] + [Step("type", None, text=t)
                                        for t in ("Dr", " Ma", "rt", "in", " ok")]),
        # stuck
        sc("hover_toolbar", [on(b) for b in (REFRESH, PRINT, HELP) * 2 + (REFRESH,)]),
        sc("type_erase", [on("note", "Re", "type")]
           + [s for _ in range(3) for s in (on("note", "x", "type"),
                                            Step("key", keys="BackSpace"))]),
        sc("key_noop", [on("note", "Ana", "type")]
           + [Step("key", keys="ctrl+F9") for _ in range(6)]),
        sc("valider_empty", [on(VALIDER) for _ in range(7)]),
        sc("menu_open_close", [s for _ in range(3) for s in (on(ACTIONS), escape)]
           + [on(ACTIONS)]),
        sc("dialog_reopen", [s for _ in range(3) for s in (on(OPEN_SHEET), escape)]
           + [on(OPEN_SHEET)]),
        sc("noop_same", [on(REFRESH) for _ in range(7)]),
    ]


FICHE_SCENARIOS = fiche_scenarios("fiche") + fiche_scenarios("web")
TK_OR_WEB = ("form", "journal", "fiche", "web")

FICHE_NOISES = {
    # recorded first, tuned on
    "tuning": [
        Noise("xload", [["xload", "-update", "1", "-geometry", "300x150+1400+700"]],
              in_app="clock"),
        Noise("watch", [["xterm", "-geometry", "60x10+1250+80", "-e", "watch", "-n", "1",
                         "date"]], in_app="spinner"),
    ],
    # recorded after the rules were set, never tuned on (dataset.py)
    "held-out-2": [
        Noise("eyes_top", [["xeyes", "-geometry", "200x150+1600+80"],
                           ["xterm", "-geometry", "90x30+1250+420", "-e", "top", "-d", "0.5"]]),
        Noise("clocks", [["xclock", "-update", "1", "-geometry", "220x220+1300+80"],
                         ["xclock", "-digital", "-strftime", "%H:%M:%S", "-update", "1",
                          "-geometry", "+1300+700"]], in_app="clock,spinner"),
    ],
    # recorded after the rules were set again, the sheet elsewhere on the screen
    "held-out-3": [
        Noise("vmstat_log", [["xterm", "-geometry", "80x15+60+700", "-e", "vmstat", "1"],
                             ["xterm", "-geometry", "50x12+1520+600", "-e", "sh", "-c",
                              "while :; do date +%T.%N; sleep 0.4; done"]],
              in_app="spinner", place=(600, 160)),
        Noise("oclock_load", [["oclock", "-geometry", "180x180+100+820"],
                              ["xload", "-update", "1", "-geometry", "400x120+1500+60"]],
              in_app="clock", place=(600, 160)),
    ],
    # recorded after the rules were set once more: the sheet elsewhere again and larger,
    # beside a number rewritten in place, a progress bar that fills and starts again, a
    # text spinner and a scrolling log
    "held-out-4": [
        Noise("ticker_bar", [["xterm", "-geometry", "24x2+1640+120", "-e", "sh", "-c",
                              "while :; do printf '\\r%s' $(date +%s%N); sleep 0.2; done"],
                             ["xterm", "-geometry", "40x2+1640+1000", "-e", "sh", "-c",
                              "i=0; while :; do i=$(( (i + 3) % 100 )); printf '\\r%3d%% %s"
                              "          ' $i $(seq -s '#' 0 $((i / 4)) | tr -d '0-9');"
                              " sleep 0.25; done"]],
              in_app="clock", place=(340, 20), scale=1.2),
        Noise("proclog_spin", [["xterm", "-geometry", "8x2+60+80", "-e", "sh", "-c",
                                "while :; do for c in / - '\\' '|'; do printf '\\r%s' \"$c\";"
                                " sleep 0.1; done; done"],
                               ["xterm", "-geometry", "30x14+1730+560", "-e", "sh", "-c",
                                "while :; do cat /proc/loadavg /proc/uptime; sleep 0.5;"
                                " done"]],
              in_app="spinner", place=(560, 90), scale=1.1),
    ],
}
"""The second batch: every patient-sheet scenario, in both applications, beside each noise
of a part."""

OTHER_APPS_NOISES = {
    # recorded while the rules were set again (the recorder runs no detector), read only
    # from the bench's printout: the first batch's applications (the form, the journal,
    # xterm) elsewhere on the screen, beside noises no other part had: an alert blinking
    # in a terminal, a line of text sliding along in another, a hex dump scrolling fast
    "held-out-5": [
        Noise("marquee_blink", [["xterm", "-fn", "10x20", "-geometry", "24x2+1480+90", "-e",
                                 "sh", "-c", "while :; do printf '\\r ALERTE capteur 3 ';"
                                 " sleep 0.5; printf '\\r                  '; sleep 0.5;"
                                 " done"],
                                ["xterm", "-geometry", "64x2+1240+900", "-e", "sh", "-c",
                                 "s='Transmission en cours - lit 12 - perfusion 250 ml/h - ';"
                                 " while :; do s=\"${s#?}${s%\"${s#?}\"}\"; printf '\\r%s' \"$s\";"
                                 " sleep 0.15; done"]],
              in_app="analog", place=(700, 330)),
        Noise("hexlog_clock", [["xterm", "-geometry", "52x20+1380+500", "-e", "sh", "-c",
                                "while :; do od -An -N16 -tx1 /dev/urandom; sleep 0.3;"
                                " done"]],
              in_app="clock,spinner", place=(260, 560)),
    ],
}
"""The third batch: every form and journal scenario, and the terminal's, beside each noise
of a part, the application elsewhere on the screen."""


class Desk:
    """One display with a noise's programs running."""

    def __init__(self, noise: Noise) -> None:
        from agent.screen.capture import Screen

        self.noise = noise
        self.x: XDisplay = start_xdisplay([(W, H, 0, 0)], window_manager=True)
        os.environ["DISPLAY"] = self.x.display
        self.screen = Screen()
        for argv in noise.programs:
            self.x.extra.append(subprocess.Popen(argv, env=self.x.env(),
                                                 stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.DEVNULL))
        time.sleep(1.5)

    def grab(self) -> Any:
        return self.screen.grab(AREA).image

    def close(self) -> None:
        self.screen.close()
        self.x.close()


class App:
    """The application a scenario acts on, and its state."""

    def __init__(self, desk: Desk, scenario: Scenario, tmp: Path) -> None:
        self.desk, self.scenario = desk, scenario
        self.state_file = tmp / f"{scenario.name}.json"
        self.state_file.unlink(missing_ok=True)
        env = desk.x.env()
        if scenario.app in TK_OR_WEB:
            argv = [sys.executable, str(Path(__file__).with_name(f"{scenario.app}_app.py")),
                    str(self.state_file), "--noise", desk.noise.in_app,
                    "--x", str(desk.noise.place[0]), "--y", str(desk.noise.place[1]),
                    "--scale", str(desk.noise.scale)]
        else:
            shell = ("stty -echo; cat > /dev/null" if scenario.app == "xterm_noecho"
                     else "cat > /dev/null")
            argv = ["xterm", "-geometry", "80x20+140+140", "-l", "-lf", str(self.state_file),
                    "-e", "sh", "-c", shell]
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while not self.state_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        if scenario.focus_first is not None:
            xdo(desk.x.display, "mousemove", *map(str, self.moved(scenario.focus_first)),
                "click", "1")
        elif desk.noise.scale == 1.0:
            # Inside the application (the page learns where it is from the pointer; the
            # terminal stays where it is).
            x, y = desk.noise.place if scenario.app in TK_OR_WEB else FORM
            xdo(desk.x.display, "mousemove", str(x + 280), str(y + 180), "click", "1")
        else:
            # A larger sheet has a button under that point: its title bar takes the click
            # (Chromium places its window in scaled pixels), then the pointer goes over
            # the page, on the empty right of the view's label.
            x, y = desk.noise.place
            if scenario.app == "web":
                x, y = round(x * desk.noise.scale), round(y * desk.noise.scale)
            xdo(desk.x.display, "mousemove", str(x + 500), str(y + 10), "click", "1")
            time.sleep(0.2)
            xdo(desk.x.display, "mousemove", str(x + 500), str(y + 140))
        time.sleep(0.4)

    def state(self) -> Any:
        time.sleep(0.15)
        if self.scenario.app in TK_OR_WEB:
            for _ in range(20):
                try:
                    data = json.loads(self.state_file.read_text())
                    return data
                except (OSError, ValueError):
                    time.sleep(0.05)
            raise RuntimeError("the form did not write its state")
        return self.state_file.stat().st_size

    def moved(self, point: tuple[int, int]) -> tuple[int, int]:
        """A point of the form's grid (measured with the form at FORM) where the form is."""
        if self.scenario.app != "form":
            return point
        x, y = self.desk.noise.place
        return point[0] + x - FORM[0], point[1] + y - FORM[1]

    def place(self, step: Step) -> Step:
        """``step`` with its control's point, read from the application's state."""
        if not step.widget:
            if step.point is None:
                return step
            return Step(step.kind, self.moved(step.point), step.text, step.keys, step.delta)
        x, y = self.state()["widgets"][step.widget]
        return Step(step.kind, (int(x), int(y)), step.text, step.keys, step.delta)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(5)


def perform(display: str, step: Step) -> None:
    if step.point is not None and step.kind in ("click", "type", "scroll"):
        xdo(display, "mousemove", *map(str, step.point))
        if step.kind != "scroll":
            xdo(display, "click", "1")
    if step.kind == "type":
        xdo(display, "type", "--delay", "15", step.text)
    elif step.kind == "key":
        xdo(display, "key", step.keys)
    elif step.kind == "scroll":
        button = "5" if step.delta < 0 else "4"
        xdo(display, "click", "--repeat", str(abs(step.delta)), "--delay", "30", button)


def action_fields(step: Step) -> dict[str, Any]:
    """What the dispatcher would have sent: type, target, parameters."""
    target = None if step.point is None else {"x_pct": round(step.point[0] / W, 5),
                                               "y_pct": round(step.point[1] / H, 5)}
    params: dict[str, Any] = {}
    if step.kind == "type":
        params = {"text": step.text}
    elif step.kind == "key":
        params = {"keys": step.keys.split("+")}
    elif step.kind == "scroll":
        params = {"delta": step.delta}
    elif step.kind == "wait":
        params = {"duration_ms": int(WAIT_S * 1000)}
    kind = {"key": "key_combo"}.get(step.kind, step.kind)
    return {"action_type": kind, "target": target, "parameters": params}


def record(desk: Desk, scenario: Scenario, out: Path, tmp: Path, rng: random.Random,
           part: str = "") -> None:
    from agent.screen import geometry

    app = App(desk, scenario, tmp)
    folder = out / f"{desk.noise.name}-{scenario.name}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    steps: list[dict[str, Any]] = []
    try:
        state = app.state()
        seen = [state]
        for i, step in enumerate(scenario.steps):
            step = app.place(step)
            time.sleep(rng.uniform(0.05, 0.5))  # the turnaround between two steps
            before = desk.grab()
            site = None
            if step.kind != "wait":
                if step.point is not None and step.kind != "scroll":
                    xdo(desk.x.display, "mousemove", *map(str, step.point))
                site = action_site(AREA, geometry.active_window_rect(), geometry.focus_rect())
            perform(desk.x.display, step)
            after = poll_after(desk, before, step)
            new_state = app.state()
            (folder / f"{i:02d}-after.jpg").write_bytes(encode_screenshot(after, CONFIG))
            fields = action_fields(step)
            if step.point is not None:
                fields["actual_position"] = dict(fields["target"])
            fields["site"] = None if site is None else site.model_dump(mode="json")
            fields["state_changed"] = (new_state not in seen if scenario.back_is_stuck
                                       else new_state != state)
            steps.append(fields)
            state = new_state
            seen.append(new_state)
    finally:
        app.close()
    changed = [s["state_changed"] for s in steps]
    last = max((i for i, c in enumerate(changed) if c), default=-1)
    # Ending on progress is progress (a step between that changed nothing is no loop).
    stuck_from = None if last == len(changed) - 1 else last + 1
    meta = {"name": folder.name, "noise": desk.noise.name, "scenario": scenario.name,
            "stuck_from": stuck_from, "steps": steps}
    if part:
        meta["part"] = part
    (folder / "sequence.json").write_text(json.dumps(meta, indent=1))
    print(f"{folder.name}: changed {''.join('1' if c else '0' for c in changed)}"
          f" stuck_from={stuck_from}", flush=True)


def poll_after(desk: Desk, before: Any, step: Step) -> Any:
    """The agent's _after: poll until the screen changed, up to its timeout; a wait sleeps."""
    if step.kind == "wait":
        time.sleep(WAIT_S)
        return desk.grab()
    deadline = time.monotonic() + CONFIG.screen_change_timeout_s
    while True:
        time.sleep(0.05)
        after = desk.grab()
        if screen_changed(before, after) or time.monotonic() >= deadline:
            return after


def plan(noises: list[Noise]) -> list[tuple[Noise, list[Scenario]]]:
    """Every form scenario on four of the noises (every other one, shifted by the
    scenario); every journal scenario on ``JOURNAL_NOISES``."""
    return [(noise, [s for s_index, s in enumerate(SCENARIOS)
                     if (n_index - s_index) % len(noises) in (0, 2, 4, 6)]
             + (JOURNAL_SCENARIOS if noise.name in JOURNAL_NOISES else []))
            for n_index, noise in enumerate(noises)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "loop_real")
    parser.add_argument("--only", default="", help="record only names containing this")
    parser.add_argument("--noises", default="", help="comma-separated noise names (all)")
    parser.add_argument("--part", choices=sorted({*FICHE_NOISES, *OTHER_APPS_NOISES}),
                        default="",
                        help="record the patient sheet's batch of this part (default: the"
                             " first batch, form and journal)")
    args = parser.parse_args()
    rng = random.Random(14)
    wanted = {n for n in args.noises.split(",") if n}
    if not args.part:
        batch = plan(NOISES)
    elif args.part in OTHER_APPS_NOISES:
        batch = [(noise, SCENARIOS + JOURNAL_SCENARIOS)
                 for noise in OTHER_APPS_NOISES[args.part]]
    else:
        batch = [(noise, FICHE_SCENARIOS) for noise in FICHE_NOISES[args.part]]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for noise, scenarios in batch:
            if wanted and noise.name not in wanted:
                continue
            todo = [s for s in scenarios if args.only in f"{noise.name}-{s.name}"]
            if not todo:
                continue
            desk = Desk(noise)
            try:
                for scenario in todo:
                    record(desk, scenario, args.out, tmp, rng, args.part)
            finally:
                desk.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
