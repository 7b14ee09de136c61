"""Read the words on a screenshot with Tesseract, through tesserocr (its C API, loaded once).

tesserocr's wheels (Linux, Windows, macOS) carry libtesseract; the language models
(``fra.traineddata``, ``eng.traineddata``) are read from a tessdata folder: Debian's
``tesseract-ocr-fra tesseract-ocr-eng``, or the folder deployed with the agent on Windows
(docs/grounding.md). Nothing is downloaded. The engine is loaded once per agent (it takes
a second or two) and used under a lock: one API is not to be used by two threads at once.

Screens are read in grey at ``UPSCALE`` times their size (screen text is smaller than what
Tesseract's models were trained on), as one block of text lines (``PSM``).
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from PIL import Image

from agent.grounding.strips import KeptStrips, Strip, join, strip_keys, strips
from agent.grounding.text import Word

DEFAULT_LANGS = "fra"
"""The French model reads the English labels of the recorded set as well as fra+eng did,
in two thirds of the time (docs/grounding.md)."""
UPSCALE = 1.25
"""Measured on the recorded set with the whole matcher (docs/grounding.md, "Speed"): x1.25
found as many labelled controls as x1.5 (eight more), with no wrong click, in about four
fifths of the time; x1 lost most labels of the smallest text."""
PSM = "SINGLE_BLOCK"
"""Tesseract's page segmentation mode (a name of ``tesserocr.PSM``): the screen as one
block of text lines. Measured against "sparse text" on the set (docs/grounding.md,
"Speed"): its layout analysis is the cheaper part, and as many labels were found."""
SEAM = 48
"""Half the rows two strips read at once share (pixels of the image): the tallest text
line read whole."""
STRIPS = 2
"""The strips the whole monitor is read as, with two Tesseracts (agent.grounding.strips):
each is kept by its pixels, so a step that changed one part of the screen reads only the
strips it touches. Two (the halves): the reading the sets were measured with
(docs/grounding.md, "Speed")."""
NO_DICTIONARIES = {"load_system_dawg": "0", "load_freq_dawg": "0"}
"""Tesseract's word lists not loaded: on the set every label found the same, a reading
about a twentieth faster (docs/grounding.md, "Speed"). Labels are not dictionary words."""
KEEP_READINGS = 64
"""The last readings kept, by their pixels: a step retried on a screen that has not
changed (and its second looks) is not read again, nor the parts a search reads again
(a dialog, a band, unread ink: up to dozens) that the step before read and did not
change (docs/grounding.md, "Speed"). A reading is a few kilobytes of words."""
CONTENT_MARGIN = 24
"""Pixels of background kept around a screen's content when its blank margins are not
read."""
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
    """``read(image) -> words`` (agent.grounding.text.Word, in the image's pixels); the
    last ``keep`` readings are kept by their pixels' digest and given again for the same
    pixels. ``variables``: Tesseract variables set at load, over ``NO_DICTIONARIES``.

    With ``workers`` 2 (a machine with two cores or more), a tall image is read as
    ``strips`` strips, two at once, one Tesseract each (it leaves Python's lock while it
    recognises). Strips overlap by ``2 * SEAM`` rows, and each keeps only the lines whose
    middle is its own: a line up to ``SEAM`` pixels high is whole in the strip that keeps
    it, and a line cut by a strip's edge is another's. The last ``keep * strips`` strips
    are kept by their pixels: a screen changed in one part reads only the strips that
    part touches (docs/grounding.md, "Speed").
    """

    name = "tesseract"

    def __init__(self, langs: str = DEFAULT_LANGS, tessdata: str | None = None,
                 upscale: float = UPSCALE, workers: int | None = None,
                 keep: int = KEEP_READINGS, crop_blank: bool = False,
                 strips: int = STRIPS,
                 variables: dict[str, str] | None = None, psm: str = PSM,
                 resample: Image.Resampling = Image.Resampling.BICUBIC) -> None:
        try:
            import tesserocr
        except ImportError as exc:  # a platform without a wheel
            raise OcrUnavailable(f"tesserocr cannot be imported: {exc}") from exc
        folder = tessdata_folder(langs, tessdata)
        # The API wants the folder itself, with a trailing separator on every platform.
        path = folder if folder.endswith(("/", "\\")) else folder + ("\\" if
                                                                     sys.platform == "win32"
                                                                     else "/")
        n = workers if workers is not None else min(2, os.cpu_count() or 1)
        settings = {**NO_DICTIONARIES, **(variables or {})}
        try:
            self._apis: list[Any] = [tesserocr.PyTessBaseAPI(path=path, lang=langs,
                                                              psm=getattr(tesserocr.PSM, psm),
                                                              variables=settings)
                                     for _ in range(max(1, n))]
        except RuntimeError as exc:
            raise OcrUnavailable(f"Tesseract did not load {langs} from {folder}: {exc}") \
                from exc
        self._tesserocr = tesserocr
        self.upscale = upscale
        self.resample = resample
        self.psm = psm
        self.keep = keep
        self.variables = settings
        self.crop_blank = crop_blank
        self.readings = 0
        """How many images Tesseract has read (a reading given again is not counted, nor
        an image whose every strip was kept)."""
        self.strips = strips
        self.strips_read = 0
        """How many strips of whole images Tesseract has read."""
        self._strips = KeptStrips(keep * strips)
        self.langs = langs
        self.workers = len(self._apis)
        self.version = tesserocr.tesseract_version().split()[1]
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[tuple[int, int], bytes], tuple[Word, ...]] = OrderedDict()
        self._pool = ThreadPoolExecutor(len(self._apis)) if len(self._apis) > 1 else None

    def read(self, image: Image.Image) -> list[Word]:
        grey = image.convert("L")
        if not self.keep:
            return self._read_content(grey)
        # Same pixels, same words: Tesseract is deterministic.
        key = pixel_key(grey)
        with self._lock:
            kept = self._recall(key)
        if kept is not None:
            return kept
        words = self._read_content(grey)
        with self._lock:
            self._remember(key, words)
        return words

    def read_many(self, images: Sequence[Image.Image]) -> list[list[Word]]:
        """The words of each image, as :meth:`read`; small images (the second looks'
        crops) are read at once, one Tesseract each, the readings kept as by ``read``."""
        greys = [image.convert("L") for image in images]
        if self._pool is None or self.crop_blank or len(greys) < 2 \
                or any(g.height >= 4 * SEAM for g in greys):
            return [self.read(g) for g in greys]
        keys = [pixel_key(g) for g in greys]
        with self._lock:
            out = [self._recall(key) for key in keys]
            todo = [i for i, words in enumerate(out) if words is None]
            # Two Tesseracts take turns on the list; each leaves Python's lock as it
            # recognises (docs/grounding.md, "Speed").
            other = self._pool.submit(self._read_each, self._apis[0], greys, todo[0::2])
            mine = self._read_each(self._apis[1], greys, todo[1::2])
            for i, words in [*other.result(), *mine]:
                out[i] = words
                self.readings += 1
                self._remember(keys[i], words)
        return [words or [] for words in out]

    def _recall(self, key: tuple[tuple[int, int], bytes]) -> list[Word] | None:
        """A kept reading of the same pixels (the caller holds the lock)."""
        kept = self._kept.get(key) if self.keep else None
        if kept is None:
            return None
        self._kept.move_to_end(key)
        return list(kept)

    def _remember(self, key: tuple[tuple[int, int], bytes], words: list[Word]) -> None:
        """Keep a reading, the oldest out past ``keep`` (the caller holds the lock)."""
        if not self.keep:
            return
        self._kept[key] = tuple(words)
        while len(self._kept) > self.keep:
            self._kept.popitem(last=False)

    def _read_each(self, api: Any, greys: Sequence[Image.Image],
                   which: Sequence[int]) -> list[tuple[int, list[Word]]]:
        return [(i, self._read(api, greys[i], 0, 0, greys[i].height)) for i in which]

    def _read_content(self, grey: Image.Image) -> list[Word]:
        """The words of ``grey``; with ``crop_blank``, read within the box around everything
        that is not the screen's background colour (the most common one), with a margin.
        Off in the agent: faster, but on the set one of two "OK" buttons was then not
        read at all and the other was clicked (docs/grounding.md, "Speed")."""
        if not self.crop_blank or grey.height < 8 * SEAM:
            return self._read_whole(grey)
        histogram = grey.histogram()
        background = histogram.index(max(histogram))
        box = grey.point([0 if v == background else 255 for v in range(256)]).getbbox()
        if box is None:
            return []
        m = CONTENT_MARGIN
        left, top = max(0, box[0] - m), max(0, box[1] - m)
        right, bottom = min(grey.width, box[2] + m), min(grey.height, box[3] + m)
        if (left, top, right, bottom) == (0, 0, grey.width, grey.height):
            return self._read_whole(grey)
        words = self._read_whole(grey.crop((left, top, right, bottom)))
        return [replace(w, box=(w.box[0] + left, w.box[1] + top, w.box[2], w.box[3]))
                for w in words]

    def _read_whole(self, grey: Image.Image) -> list[Word]:
        """With two Tesseracts, ``grey`` read as ``strips`` strips (agent.grounding.strips),
        the two taking the next strip to read in turn; a strip whose pixels were read
        before is not read again."""
        with self._lock:
            parts = strips(grey.height, self.strips, SEAM) if self._pool else []
            if len(parts) < 2:
                self.readings += 1
                return self._read(self._apis[0], grey, 0, 0, grey.height)
            keys = strip_keys(grey, parts)
            found = [self._strips.recall(key) if self.keep else None for key in keys]
            todo = [i for i, words in enumerate(found) if words is None]
            self.readings += bool(todo)
            self.strips_read += len(todo)
            queue = iter(todo)  # next() on it is atomic under Python's lock
            assert self._pool is not None
            other = self._pool.submit(self._read_strips, self._apis[0], grey, parts, queue)
            mine = self._read_strips(self._apis[1], grey, parts, queue)
            for i, words in [*other.result(), *mine]:
                found[i] = words
                if self.keep:
                    self._strips.remember(keys[i], words)
        return join([words or [] for words in found])

    def _read_strips(self, api: Any, grey: Image.Image, parts: Sequence[Strip],
                     queue: Iterator[int]) -> list[tuple[int, list[Word]]]:
        out = []
        for i in queue:
            p = parts[i]
            out.append((i, self._read(api, grey.crop((0, p.top, grey.width, p.bottom)),
                                      p.top, p.own_from, p.own_to)))
        return out

    def _read(self, api: Any, grey: Image.Image, dy: int, keep_from: int,
              keep_to: int) -> list[Word]:
        """The words of ``grey`` (the part of the image from row ``dy``), in the image's
        pixels, of the lines whose middle row is in ``keep_from .. keep_to``."""
        k = self.upscale
        if k != 1:
            grey = grey.resize((round(grey.width * k), round(grey.height * k)), self.resample)
        ril = self._tesserocr.RIL
        lines: list[list[Word]] = []
        api.SetImage(grey)
        api.Recognize()
        for it in self._tesserocr.iterate_level(api.GetIterator(), ril.WORD):
            if it.Empty(ril.WORD):
                continue
            if it.IsAtBeginningOf(ril.TEXTLINE) or not lines:
                lines.append([])
            text = it.GetUTF8Text(ril.WORD) or ""
            box = it.BoundingBox(ril.WORD)
            if not text.strip() or box is None:
                continue
            x1, y1, x2, y2 = box
            lines[-1].append(Word(text, it.Confidence(ril.WORD) / 100.0,
                                  (round(x1 / k), dy + round(y1 / k),
                                   max(1, round((x2 - x1) / k)),
                                   max(1, round((y2 - y1) / k))), len(lines) - 1))
        api.Clear()
        kept: list[Word] = []
        for line in lines:
            if line:
                top = min(w.box[1] for w in line)
                bottom = max(w.box[1] + w.box[3] for w in line)
                if keep_from <= (top + bottom) / 2 < keep_to:
                    kept.extend(line)
        return kept

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown()
            for api in self._apis:
                api.End()


def pixel_key(grey: Image.Image) -> tuple[tuple[int, int], bytes]:
    """What tells two images' pixels apart: their size and a digest of their bytes."""
    return grey.size, hashlib.blake2b(grey.tobytes(), digest_size=16).digest()
