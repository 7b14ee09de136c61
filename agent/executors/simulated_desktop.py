"""The simulated executor's desktop: one window in memory with a title and a few widgets
(buttons, text fields), a pointer, a scroll offset and, when a scenario raises one, a system
dialog, rendered as small PNG frames (agent/executors/simulated.py performs actions on it).
Each frame shows all of that, so an input that does something changes the frame and one
that does nothing (a scenario ``loop``) does not.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from agent.executors.scenario import DesktopSpec

WIDTH, HEIGHT = 320, 200

DIALOG_TITLES = {
    "uac_consent": "Contrôle de compte d'utilisateur",
    "credui": "Sécurité Windows",
    "smartscreen": "Windows a protégé votre ordinateur",
}


def _font() -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=10)
    except (OSError, TypeError, ImportError):  # Pillow built without FreeType
        return ImageFont.load_default()


@dataclass(slots=True)
class Widget:
    name: str
    kind: str
    x: float
    y: float
    w: float
    h: float
    text: str = ""
    opens: str | None = None

    @property
    def centre(self) -> tuple[float, float]:
        return self.x + self.w / 2, self.y + self.h / 2

    def contains(self, x: float, y: float) -> bool:
        return self.x <= x <= self.x + self.w and self.y <= y <= self.y + self.h


@dataclass(slots=True)
class SimulatedDesktop:
    """The screen state. Mutated only by the execution thread."""

    window_title: str
    widgets: list[Widget]
    focused: str | None = None
    pointer: tuple[float, float] | None = None
    clicks: int = 0
    scroll: int = 0
    last_keys: str = ""
    select_all: bool = False
    dialog: str | None = None
    status: str = ""
    typed_elsewhere: str = ""
    clock: int | None = None  # seconds since midnight, shown in the title bar when set
    banner: str = ""  # the patient banner, under the title bar
    # A banner with ``{typed}``: the record of what was last typed opens (a patient search).
    banner_template: str = ""
    _font: Any = field(default_factory=_font, repr=False)

    @classmethod
    def from_spec(cls, spec: DesktopSpec) -> SimulatedDesktop:
        return cls(spec.window_title, [Widget(**w.model_dump()) for w in spec.widgets],
                   clock=10 * 3600 if spec.clock else None,
                   banner=spec.banner.replace("{typed}", "").strip(),
                   banner_template=spec.banner if "{typed}" in spec.banner else "")

    def find(self, text: str) -> Widget | None:
        """The widget named ``text`` (case-insensitive; exact name first, then substring)."""
        wanted = text.strip().casefold()
        for widget in self.widgets:
            if widget.name.casefold() == wanted:
                return widget
        for widget in self.widgets:
            if wanted and wanted in widget.name.casefold():
                return widget
        return None

    def widget_at(self, x: float, y: float) -> Widget | None:
        return next((w for w in self.widgets if w.contains(x, y)), None)

    def title_matches(self, patterns: list[str]) -> bool:
        title = self.window_title.casefold()
        return any(p.casefold() in title for p in patterns if p)

    # Inputs ---------------------------------------------------------------------------------

    def click(self, x: float, y: float, kind: str) -> None:
        self.pointer = (x, y)
        self.clicks += 1
        widget = self.widget_at(x, y)
        if widget is None:
            self.status = f"{kind} at {x:.2f},{y:.2f}"
        elif widget.kind == "field":
            self.focused = widget.name
            self.status = f"focus {widget.name}"
        else:
            self.status = f"{kind} {widget.name}"
            if widget.opens and kind != "right_click":
                self.window_title = widget.opens

    def type_text(self, text: str) -> None:
        widget = self.find(self.focused) if self.focused else None
        if widget is None:
            self.typed_elsewhere += text
        elif self.select_all:
            widget.text = text
        else:
            widget.text += text
        self.select_all = False
        self.status = f"typed {len(text)} chars"
        if self.banner_template:
            self.banner = self.banner_template.replace("{typed}", text.strip())

    def press(self, keys: list[str]) -> None:
        self.last_keys = "+".join(keys)
        self.select_all = [k.casefold() for k in keys] == ["ctrl", "a"]
        self.status = f"keys {self.last_keys}"

    def scroll_by(self, delta: int) -> None:
        self.scroll += delta
        self.status = f"scroll {self.scroll}"

    # Frames ---------------------------------------------------------------------------------

    def render(self) -> bytes:
        """The current frame as PNG bytes (320x200)."""
        image = Image.new("RGB", (WIDTH, HEIGHT), (236, 239, 244))
        draw = ImageDraw.Draw(image)
        draw.rectangle((0, 0, WIDTH, 14), fill=(40, 70, 120))
        self._text(draw, (3, 1), self.window_title, (255, 255, 255))
        if self.clock is not None:
            c = self.clock
            draw.rectangle((WIDTH - 52, 0, WIDTH, 14), fill=(40, 70, 120))
            self._text(draw, (WIDTH - 48, 1), f"{c // 3600 % 24:02d}:{c // 60 % 60:02d}:"
                       f"{c % 60:02d}", (255, 255, 255))
        if self.banner:
            self._text(draw, (3, 16), self.banner[:60], (120, 0, 0))
        for w in self.widgets:
            box = (w.x * WIDTH, w.y * HEIGHT, (w.x + w.w) * WIDTH, (w.y + w.h) * HEIGHT)
            fill = (255, 255, 255) if w.kind == "field" else (200, 210, 225)
            outline = (220, 120, 0) if w.name == self.focused else (90, 90, 90)
            draw.rectangle(box, fill=fill, outline=outline)
            label = f"{w.name}: {w.text}" if w.kind == "field" else w.name
            self._text(draw, (box[0] + 3, box[1] + 2), label[:48], (0, 0, 0))
        status = f"clicks={self.clicks} scroll={self.scroll} keys={self.last_keys} {self.status}"
        self._text(draw, (3, HEIGHT - 13), status[:60], (60, 60, 60))
        if self.pointer is not None:
            px, py = self.pointer[0] * WIDTH, self.pointer[1] * HEIGHT
            draw.ellipse((px - 3, py - 3, px + 3, py + 3), outline=(200, 0, 0))
        if self.dialog is not None:
            draw.rectangle((40, 50, WIDTH - 40, HEIGHT - 50), fill=(250, 250, 210),
                           outline=(0, 0, 0))
            self._text(draw, (46, 56), DIALOG_TITLES.get(self.dialog, self.dialog),
                       (0, 0, 0))
        out = io.BytesIO()
        image.save(out, "PNG", optimize=True)
        return out.getvalue()

    def _text(self, draw: ImageDraw.ImageDraw, xy: tuple[float, float], text: str,
              fill: tuple[int, int, int]) -> None:
        try:
            draw.text(xy, text, fill=fill, font=self._font)
        except UnicodeEncodeError:  # the bitmap fallback font is latin-1 only
            draw.text(xy, text.encode("latin-1", "replace").decode("latin-1"), fill=fill,
                      font=self._font)
