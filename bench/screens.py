"""Labelled 1920x1080 screen sequences drawn with PIL, for the loop detector's signal A.

A sequence is the screenshots after consecutive agent steps on one application screen (a
form, a list, a dialog over a form):

- *progress*: every step changes a little: a few characters typed in a field, a box ticked,
  a row added or selected, the focus moved, a dialog opened or filled or closed, a scroll;
- *stuck*: after ``progress_steps`` such steps (0 = stuck from the start) nothing the
  workflow cares about changes any more;

and in both, what changes on a real desktop whatever the agent does: a clock with seconds
in the taskbar, a blinking caret in the focused field, a spinner, a notification counter.
Each frame is encoded as PNG (lossless) or as JPEG at a random quality (50-90) per frame,
which puts different compression noise on every frame.

Used by bench/loop_eval.py and by the tests (``from bench.screens import ...``).
"""

from __future__ import annotations

import io
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Literal

from PIL import Image, ImageDraw, ImageFont

W, H = 1920, 1080
TASKBAR = 44
Encoding = Literal["png", "jpeg"]

FIRST = ["Jean", "Marie", "Paul", "Lucie", "Ahmed", "Sofia", "Louis", "Chloé", "Yann", "Inès"]
LAST = ["Dupont", "Martin", "Bernard", "Petit", "Durand", "Leroy", "Moreau", "Fournier"]
WORDS = ["IRM", "scanner", "bilan", "sanguin", "contrôle", "urgent", "allergie", "dossier",
         "radio", "thorax", "genou", "suivi", "pédiatrie", "cardiologie", "12/03/2026"]


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    try:  # DejaVu has the accents; Pillow's own font is the fallback
        return ImageFont.truetype("DejaVuSans.ttf", size)
    except OSError:
        pass
    try:
        return ImageFont.load_default(size=size)
    except (OSError, TypeError, ImportError):  # Pillow without FreeType
        return ImageFont.load_default()


FONT, SMALL, TITLE = _font(15), _font(13), _font(18)


@dataclass
class Field:
    label: str
    x: int
    y: int
    w: int
    text: str = ""
    label_above: bool = False


@dataclass
class Check:
    label: str
    x: int
    y: int
    ticked: bool = False


@dataclass
class Ui:
    """What the application shows; a step of progress mutates it."""

    kind: Literal["form", "list", "dialog"]
    title: str
    fields: list[Field]
    checks: list[Check]
    rows: list[str]
    focus: int | None = None  # index in fields (the caret is there)
    selected: int | None = None
    scroll: int = 0
    dialog: list[Field] | None = None  # fields of an open dialog
    dialog_focus: int | None = None
    status: str = "Prêt"


@dataclass
class Ambient:
    """What changes by itself: clock, caret, spinner, notification counter."""

    clock: bool
    seconds: int
    caret: bool
    caret_on: bool = True
    spinner: bool = False
    phase: int = 0
    badge: int | None = None

    def tick(self, rng: random.Random) -> Ambient:
        """The next frame's ambient: a step takes 1-6 s."""
        return replace(
            self, seconds=self.seconds + rng.randint(1, 6),
            caret_on=rng.random() < 0.5 if self.caret else self.caret_on,
            phase=rng.randrange(12) if self.spinner else self.phase,
            badge=(self.badge + 1 if self.badge is not None and rng.random() < 0.15
                   else self.badge))


@dataclass
class Sequence:
    """Encoded frames and their label."""

    name: str
    frames: list[bytes]
    encoding: Encoding
    stuck_from: int | None
    """Index of the first frame after which nothing changes any more (None: progress)."""
    steps: list[str] = field(default_factory=list)


def _name(rng: random.Random) -> str:
    return f"{rng.choice(LAST)} {rng.choice(FIRST)}"


def new_ui(rng: random.Random) -> Ui:
    kinds: list[Literal["form", "list", "dialog"]] = ["form", "list", "dialog"]
    kind = rng.choice(kinds)
    fields = [Field(lbl, 560, 150 + i * 58, rng.choice([320, 420, 560]))
              for i, lbl in enumerate(rng.sample(
                  ["Nom", "Prénom", "Date de naissance", "Adresse", "Téléphone", "Médecin",
                   "Motif", "Commentaire", "N° de dossier", "Service"], 6))]
    checks = [Check(lbl, 1250, 150 + i * 40) for i, lbl in enumerate(rng.sample(
        ["Consentement signé", "Allergies vérifiées", "À jeun", "Accompagné",
         "Urgence", "Transport"], 4))]
    rows = [f"{_name(rng)}   {rng.randint(1, 28):02d}/0{rng.randint(1, 9)}/2026   "
            f"{rng.choice(WORDS)}" for _ in range(rng.randint(4, 12))]
    for f in fields[:rng.randint(0, 3)]:
        f.text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
    if kind == "list":  # a search box above the table, no check boxes
        fields, checks = [Field("Recherche", 560, 58, 560)], []
    ui = Ui(kind, rng.choice(["Dossier patient — Easily", "Admissions", "Planning imagerie"]),
            fields, checks, rows, focus=rng.randrange(len(fields)))
    if kind == "dialog":
        ui.dialog, ui.dialog_focus = _dialog(), 0
    return ui


def _dialog() -> list[Field]:
    return [Field(lbl, 760, 430 + i * 58, 400, label_above=True)
            for i, lbl in enumerate(["Examen", "Date", "Remarque"])]


def progress_step(ui: Ui, rng: random.Random) -> str:
    """Change ``ui`` a little, as one agent step would; the kind of change."""
    if ui.dialog is not None:
        choice = rng.choice(["type", "type", "tab", "close"])
        if choice == "close":
            ui.dialog, ui.dialog_focus = None, None
            ui.rows.append(f"{_name(rng)}   ajouté   {rng.choice(WORDS)}")
            ui.status = f"Enregistré ({len(ui.rows)} lignes)"
            return "dialog_close"
        assert ui.dialog_focus is not None
        if choice == "tab" and ui.dialog_focus + 1 < len(ui.dialog):
            ui.dialog_focus += 1
            return "dialog_tab"
        ui.dialog[ui.dialog_focus].text += _chars(rng)
        return "dialog_type"
    if ui.kind == "list":
        choice = rng.choice(["type", "row", "select", "select", "scroll", "open"])
    else:
        choice = rng.choice(["type", "type", "type", "tick", "row", "tab", "open"])
    if choice == "tick" and any(not c.ticked for c in ui.checks):
        rng.choice([c for c in ui.checks if not c.ticked]).ticked = True
        return "tick"
    if choice == "row":
        ui.rows.append(f"{_name(rng)}   {rng.randint(1, 28):02d}/11/2026   "
                       f"{rng.choice(WORDS)}")
        return "row"
    if choice == "select":
        ui.selected = rng.choice([i for i in range(len(ui.rows)) if i != ui.selected])
        return "select"
    if choice == "scroll" and len(ui.rows) > 6:
        ui.scroll = (ui.scroll + 3) % max(1, len(ui.rows) - 3)
        return "scroll"
    if choice == "tab" and ui.focus is not None and ui.focus + 1 < len(ui.fields):
        ui.focus += 1  # forward only: a workflow fills a form, it does not go round it
        return "tab"
    if choice == "open":
        ui.dialog, ui.dialog_focus = _dialog(), 0
        return "dialog_open"
    if ui.focus is None:
        ui.focus = 0
    ui.fields[ui.focus].text += _chars(rng)
    return "type"


def _chars(rng: random.Random) -> str:
    """A few characters: 1 to 8, often a word start."""
    n = rng.choice([1, 2, 3, 3, 4, 5, 6, 8])
    word = rng.choice(WORDS + FIRST + LAST)
    start = rng.randrange(max(1, len(word) - n + 1))
    return word[start:start + n]


def render(ui: Ui, amb: Ambient) -> Image.Image:
    image = Image.new("RGB", (W, H), (243, 244, 247))
    d = ImageDraw.Draw(image)
    d.rectangle((0, 0, W, 48), fill=(32, 64, 112))
    d.text((16, 14), ui.title, fill=(255, 255, 255), font=TITLE)
    d.rectangle((0, 48, 300, H - TASKBAR), fill=(226, 230, 238))
    for i, item in enumerate(["Accueil", "Patients", "Rendez-vous", "Imagerie", "Résultats",
                              "Facturation", "Paramètres"]):
        d.text((24, 80 + i * 36), item, fill=(40, 40, 60), font=FONT)
    if amb.spinner:
        _spinner(d, 1780, 24, amb.phase)
        d.text((1600, 16), "Synchronisation…", fill=(230, 230, 255), font=SMALL)
    if ui.kind == "list":
        _list(d, ui, amb)
    else:
        _form(d, ui, amb)
    if ui.dialog is not None:
        d.rectangle((700, 360, 1240, 660), fill=(255, 255, 255), outline=(60, 60, 60), width=2)
        d.rectangle((700, 360, 1240, 396), fill=(32, 64, 112))
        d.text((714, 368), "Nouvel examen", fill=(255, 255, 255), font=FONT)
        for i, f in enumerate(ui.dialog):
            _field(d, f, focused=i == ui.dialog_focus, caret=amb.caret and amb.caret_on)
        d.rectangle((1120, 610, 1220, 644), fill=(32, 64, 112))
        d.text((1146, 618), "Valider", fill=(255, 255, 255), font=FONT)
    d.text((320, H - TASKBAR - 28), ui.status, fill=(90, 90, 90), font=SMALL)
    d.rectangle((0, H - TASKBAR, W, H), fill=(28, 28, 36))
    d.text((16, H - TASKBAR + 12), "Démarrer", fill=(255, 255, 255), font=FONT)
    if amb.clock:
        s = amb.seconds
        d.text((1810, H - TASKBAR + 12), f"{s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d}",
               fill=(255, 255, 255), font=FONT)
    if amb.badge is not None:
        d.ellipse((1740, H - TASKBAR + 8, 1770, H - TASKBAR + 36), fill=(200, 40, 40))
        d.text((1747, H - TASKBAR + 13), str(amb.badge), fill=(255, 255, 255), font=SMALL)
    return image


def _spinner(d: ImageDraw.ImageDraw, cx: int, cy: int, phase: int) -> None:
    import math
    for k in range(12):
        a = 2 * math.pi * k / 12
        shade = 255 if k == phase else 120
        d.line((cx + 6 * math.cos(a), cy + 6 * math.sin(a),
                cx + 14 * math.cos(a), cy + 14 * math.sin(a)), fill=(shade, shade, 255),
               width=3)


def _field(d: ImageDraw.ImageDraw, f: Field, focused: bool, caret: bool) -> None:
    """A text field: its box at (x, y), its label on the left (form) or above (dialog)."""
    if f.label_above:
        d.text((f.x, f.y - 18), f.label, fill=(40, 40, 40), font=SMALL)
    else:
        d.text((f.x - 200, f.y + 6), f.label, fill=(40, 40, 40), font=FONT)
    outline = (30, 110, 220) if focused else (150, 150, 160)
    d.rectangle((f.x, f.y, f.x + f.w, f.y + 30), fill=(255, 255, 255), outline=outline,
                width=2 if focused else 1)
    d.text((f.x + 6, f.y + 7), f.text, fill=(0, 0, 0), font=FONT)
    if focused and caret:
        end = f.x + 7 + int(d.textlength(f.text, font=FONT))
        d.line((end, f.y + 5, end, f.y + 25), fill=(0, 0, 0), width=1)


def _form(d: ImageDraw.ImageDraw, ui: Ui, amb: Ambient) -> None:
    for i, f in enumerate(ui.fields):
        _field(d, f, focused=ui.dialog is None and i == ui.focus,
               caret=amb.caret and amb.caret_on)
    for c in ui.checks:
        d.rectangle((c.x, c.y, c.x + 18, c.y + 18), fill=(255, 255, 255), outline=(90, 90, 90))
        if c.ticked:
            d.line((c.x + 3, c.y + 9, c.x + 8, c.y + 15, c.x + 16, c.y + 3), fill=(20, 120, 40),
                   width=3)
        d.text((c.x + 28, c.y + 1), c.label, fill=(40, 40, 40), font=FONT)
    top = 150 + len(ui.fields) * 58 + 30
    d.text((360, top), "Historique", fill=(40, 40, 40), font=FONT)
    for i, row in enumerate(ui.rows[-8:]):
        d.text((360, top + 28 + i * 24), row, fill=(60, 60, 60), font=SMALL)


def _list(d: ImageDraw.ImageDraw, ui: Ui, amb: Ambient) -> None:
    _field(d, ui.fields[0], focused=ui.dialog is None, caret=amb.caret and amb.caret_on)
    d.rectangle((340, 100, 1860, 130), fill=(210, 216, 228))
    for x, head in ((350, "Patient"), (800, "Date"), (1100, "Examen")):
        d.text((x, 107), head, fill=(20, 20, 20), font=FONT)
    for i, row in enumerate(ui.rows[ui.scroll:ui.scroll + 30]):
        y = 136 + i * 26
        if ui.selected == ui.scroll + i:
            d.rectangle((340, y - 2, 1860, y + 22), fill=(190, 215, 250))
        d.text((350, y + 2), row, fill=(30, 30, 30), font=FONT)


def encode(image: Image.Image, encoding: Encoding, rng: random.Random) -> bytes:
    out = io.BytesIO()
    if encoding == "png":
        image.save(out, "PNG", compress_level=1)
    else:
        image.save(out, "JPEG", quality=rng.randint(50, 90))
    return out.getvalue()


def new_ambient(rng: random.Random) -> Ambient:
    return Ambient(clock=rng.random() < 0.9, seconds=rng.randrange(86400),
                   caret=rng.random() < 0.8, spinner=rng.random() < 0.4,
                   badge=rng.randint(1, 9) if rng.random() < 0.4 else None)


def sequence_images(rng: random.Random, frames: int, stuck_from: int | None,
                    ambient: Ambient | None = None) -> tuple[list[Image.Image], list[str]]:
    """Frames of one sequence: progress steps until ``stuck_from`` (None: all progress)."""
    ui, amb = new_ui(rng), ambient or new_ambient(rng)
    images, steps = [render(ui, amb)], ["start"]
    for i in range(1, frames):
        amb = amb.tick(rng)
        steps.append(progress_step(ui, rng) if stuck_from is None or i <= stuck_from
                     else "none")
        images.append(render(ui, amb))
    return images, steps


def sequences(count: int, seed: int = 7, frames: int = 10,
              encodings: tuple[Encoding, ...] = ("png", "jpeg")) -> Iterator[Sequence]:
    """``count`` sequences (half progress, half stuck), each in every encoding."""
    rng = random.Random(seed)
    for n in range(count):
        stuck_from = None if n % 2 == 0 else rng.choice([0, 0, 1, 2, 3, 4])
        length = frames if stuck_from is None else stuck_from + frames
        images, steps = sequence_images(rng, length, stuck_from)
        for encoding in encodings:
            kind = "progress" if stuck_from is None else f"stuck@{stuck_from}"
            yield Sequence(f"{n:03d}-{kind}-{encoding}",
                           [encode(im, encoding, rng) for im in images], encoding,
                           stuck_from, steps)
