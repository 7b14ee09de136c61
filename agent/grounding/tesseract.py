"""Read the words on a screenshot with Tesseract, through tesserocr (its C API, loaded once).

tesserocr's wheels (Linux, Windows, macOS) carry libtesseract; the language models
(``fra.traineddata``, ``eng.traineddata``) are read from a tessdata folder: Debian's
``tesseract-ocr-fra tesseract-ocr-eng``, or the folder deployed with the agent on Windows
(docs/grounding.md). Nothing is downloaded. The engine is loaded once per agent (it takes
a second or two) and used under a lock: one API is not to be used by two threads at once.

Screens are read in grey at ``UPSCALE`` times their size (screen text is smaller than what
Tesseract's models were trained on), with page segmentation "sparse text" (text anywhere,
no reading order: a screen is not a page).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

from PIL import Image

from agent.grounding.text import Word

DEFAULT_LANGS = "fra"
"""The French model reads the English labels of the recorded set as well as fra+eng did,
in two thirds of the time (docs/grounding.md)."""
UPSCALE = 1.5
"""Measured on the recorded set (docs/grounding.md): x1.5 read every labelled control that
x2 read, and one more, for half the pixels."""
TESSDATA_FOLDERS = (
    "/usr/share/tesseract-ocr/5/tessdata", "/usr/share/tesseract-ocr/4.00/tessdata",
    "/usr/share/tessdata", "/usr/local/share/tessdata",
    r"C:\Program Files\Tesseract-OCR\tessdata",
)


def bundled() -> str:
    """The ``tessdata`` folder of the Windows agent folder (cli/bundle.py), beside the
    folder of its python.exe."""
    return str(Path(sys.executable).resolve().parent.parent / "tessdata")


class OcrUnavailable(RuntimeError):
    """The OCR engine cannot run here (library or language models missing)."""


def tessdata_folder(langs: str, configured: str | None = None) -> str:
    """The folder that has every language of ``langs``: ``configured`` (LEA_OCR_TESSDATA),
    else ``TESSDATA_PREFIX``, else the agent folder's own, else the usual places."""
    wanted = [f"{lang}.traineddata" for lang in langs.split("+") if lang]
    places = [configured] if configured else \
        [p for p in (os.environ.get("TESSDATA_PREFIX"),) if p] + [bundled()] + \
        list(TESSDATA_FOLDERS)
    for place in places:
        if place and all((Path(place) / name).is_file() for name in wanted):
            return place
    raise OcrUnavailable(f"no tessdata folder with {', '.join(wanted)} in {places}: install "
                         "tesseract-ocr-fra and tesseract-ocr-eng (Debian) or set "
                         "LEA_OCR_TESSDATA (docs/grounding.md)")


class TesseractReader:
    """``read(image) -> words`` (agent.grounding.text.Word, in the image's pixels)."""

    name = "tesseract"

    def __init__(self, langs: str = DEFAULT_LANGS, tessdata: str | None = None,
                 upscale: float = UPSCALE) -> None:
        try:
            import tesserocr
        except ImportError as exc:  # a platform without a wheel
            raise OcrUnavailable(f"tesserocr cannot be imported: {exc}") from exc
        folder = tessdata_folder(langs, tessdata)
        # The API wants the folder itself, with a trailing separator on every platform.
        path = folder if folder.endswith(("/", "\\")) else folder + ("\\" if
                                                                     sys.platform == "win32"
                                                                     else "/")
        try:
            self._api: Any = tesserocr.PyTessBaseAPI(path=path, lang=langs,
                                                     psm=tesserocr.PSM.SPARSE_TEXT)
        except RuntimeError as exc:
            raise OcrUnavailable(f"Tesseract did not load {langs} from {folder}: {exc}") \
                from exc
        self._tesserocr = tesserocr
        self.upscale = upscale
        self.version = tesserocr.tesseract_version().split()[1]
        self._lock = threading.Lock()

    def read(self, image: Image.Image) -> list[Word]:
        grey = image.convert("L")
        k = self.upscale
        if k != 1:
            grey = grey.resize((round(grey.width * k), round(grey.height * k)),
                               Image.Resampling.BICUBIC)
        ril = self._tesserocr.RIL
        words: list[Word] = []
        with self._lock:
            self._api.SetImage(grey)
            self._api.Recognize()
            line = -1
            for it in self._tesserocr.iterate_level(self._api.GetIterator(), ril.WORD):
                if it.Empty(ril.WORD):
                    continue
                if it.IsAtBeginningOf(ril.TEXTLINE):
                    line += 1
                text = it.GetUTF8Text(ril.WORD) or ""
                box = it.BoundingBox(ril.WORD)
                if not text.strip() or box is None:
                    continue
                x1, y1, x2, y2 = box
                words.append(Word(text, it.Confidence(ril.WORD) / 100.0,
                                  (round(x1 / k), round(y1 / k), max(1, round((x2 - x1) / k)),
                                   max(1, round((y2 - y1) / k))), max(line, 0)))
            self._api.Clear()
        return words

    def close(self) -> None:
        with self._lock:
            self._api.End()
