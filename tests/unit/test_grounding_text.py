"""Text grounding decisions (agent/grounding/text.py) and the text method of the desktop
executor's resolution (agent/executors/desktop_target.py), on words given directly; the
OCR itself is tested on a recorded screen at the end."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from agent.executors.desktop_config import ConfigError, DesktopConfig
from agent.executors.desktop_target import resolution_order, resolve_point
from agent.executors.desktop_text import TextSettings
from agent.grounding.closer import read_closer
from agent.grounding.items import item_by_place
from agent.grounding.second_look import look_again_boxes, near_misses, twin_seen_again
from agent.grounding.text import (
    Candidate,
    Word,
    candidates,
    decide,
    normalise,
    phrases,
    stacks,
)
from messages.workflow import TargetSpec

DATA = Path(__file__).resolve().parent.parent / "data" / "grounding"


def word(text: str, x: int, y: int, line: int, conf: float = 0.95, h: int = 12) -> Word:
    return Word(text, conf, (x, y, 8 * len(text), h), line)


def test_normalise_folds_case_accents_ligatures_punctuation_and_spaces() -> None:
    assert normalise("  ENREGISTRER… ") == "enregistrer"
    assert normalise("Cœur et vaisseaux") == "coeur et vaisseaux"
    assert normalise("Reçu à l'accueil") == "recu a l accueil"
    assert normalise("Numéro de séjour :") == "numero de sejour"
    assert normalise("Élève Ærosol") == "eleve aerosol"


def test_words_far_apart_on_a_line_are_two_phrases() -> None:
    words = [word("OK", 100, 10, 0), word("Annuler", 160, 10, 0),
             word("Rechercher", 400, 10, 1), word("un", 484, 10, 1),
             word("patient", 504, 10, 1)]
    assert [[w.text for w in p] for p in phrases(words)] == \
        [["OK"], ["Annuler"], ["Rechercher", "un", "patient"]]


def test_a_label_matches_a_whole_phrase_not_a_piece_of_another() -> None:
    words = [word("Enregistrer", 100, 10, 0), word("sous...", 192, 10, 0),
             word("Notes", 100, 60, 1), word("medicales", 144, 60, 1)]
    ranked = candidates(words, "Enregistrer")
    assert ranked[0].text == "Enregistrer sous..." and ranked[0].score < 0.8
    assert decide(ranked, "Enregistrer").error == "target_not_found"
    # Accents lost by the OCR and an OCR split inside a word still match.
    assert candidates(words, "Notes médicales")[0].score == 1.0
    split = [word("Enre", 10, 10, 0), word("gistrer", 46, 10, 0)]
    assert candidates(split, "Enregistrer")[0].score == 1.0


def menu_bar(x: int, y: int, line: int) -> list[Word]:
    """A GTK menu bar as Tesseract reads it: one line, titles a text height apart."""
    out = []
    for title in ("Fichier", "Edition", "Rechercher", "Document", "Aide"):
        out.append(word(title, x, y, line))
        x += 8 * len(title) + 12
    return out


def test_a_menu_title_is_an_item_only_where_the_recording_points_at_it() -> None:
    """Titles a text height apart are one phrase (terminal text sets words as far
    apart): "Document" is taken as an item of the row only under the anchor or at the
    recorded position, and never if the label also reads as words elsewhere."""
    bar = menu_bar(100, 20, 0)
    assert decide(candidates(bar, "Document"), "Document").error == "target_not_found"
    at = (100 + 8 * 24 + 36 + 32, 26)  # the centre of "Document"
    d = item_by_place(bar, "Document", 0.8, 0.15, at, None)
    assert d.chosen is not None and d.chosen.text == "Document" and d.tie_broken_by == "position"
    anchored = item_by_place(bar, "Document", 0.8, 0.15, None, (at[0] - 40, 10, 80, 32))
    assert anchored.chosen is not None and anchored.tie_broken_by == "anchor"
    for recorded, anchor in [(None, None), ((900, 500), None), (None, (880, 480, 80, 32))]:
        d = item_by_place(bar, "Document", 0.8, 0.15, recorded, anchor)
        assert d.chosen is None and d.error == "target_not_found", (recorded, anchor)
    # The same word in a sentence elsewhere: two places, no click.
    notes = [word(w, x, 700, 1) for w, x in [("Le", 100, ), ("Document", 128), ("signe", 200)]]
    twice = item_by_place(bar + notes, "Document", 0.8, 0.15, at, None)
    assert twice.chosen is None and twice.error == "ambiguous_target"
    # Twice on one row (a toolbar beside the menu bar): two places too.
    again = item_by_place([*bar, word("Document", 450, 20, 0)], "Document", 0.8, 0.15, at,
                          None)
    assert again.chosen is None and again.error == "ambiguous_target"
    # "Fichier" misread "ici": the run "ici Edition" holds the chosen word, one place.
    misread = [word("ici", 132, 20, 0), *menu_bar(100, 20, 0)[1:]]
    assert item_by_place(misread, "Edition", 0.8, 0.15, (196, 26), None).chosen
    # A label's own spaces are narrower: "Enregistrer sous" is never "Enregistrer".
    sous = [word("Enregistrer", 100, 20, 0), word("sous...", 192, 20, 0)]
    assert item_by_place(sous, "Enregistrer", 0.8, 0.15, (144, 26), None).chosen is None


def test_a_long_label_is_matched_across_the_ocr_lines_of_one_row() -> None:
    """A banner read as two OCR lines, its colon lost (a wide gap): one candidate."""
    words = [word("Attention", 100, 50, 0), word("vous", 200, 50, 1),
             word("utilisez", 236, 50, 1), word("le", 304, 50, 1),
             word("compte", 324, 50, 1), word("administrateur.", 380, 50, 1)]
    label = "Attention : vous utilisez le compte administrateur."
    (best, *_rest) = candidates(words, label)
    assert best.score >= 0.95 and best.box[0] == 100
    assert decide(candidates(words, label), label).chosen is not None


def test_a_word_read_in_pieces_is_read_again_closer() -> None:
    """"Docume" (a letter lost at a small size): its phrase is read again alone, at a
    larger scale, and the label found there; the rest of the reading stands."""
    img = Image.new("RGB", (1920, 1080), "white")
    full = [word("Docume", 300, 200, 0), word("Annuler", 300, 600, 1)]
    reads: list[tuple[int, int]] = []

    def read(image: Image.Image) -> list[Word]:
        reads.append(image.size)
        if image.size == (1920, 1080):
            return full
        return [word("Document", 2 * 24, 2 * 7, 0, h=24)] if image.size[1] < 60 else []

    (closer,) = read_closer(full, candidates(full, "Document"), 0.8, (1920, 1080))
    x, y, w, h = closer.crop
    assert x <= 300 and x + w >= 348 and y <= 200 and y + h >= 212 and closer.scale > 1
    found = resolve_point(TargetSpec(by_text="Document"), img, (0, 0), (0, 0, 1920, 1080),
                          (1.0,), 0.85, TextSettings(read))
    assert found.found and found.box is not None, found
    assert 300 <= (found.x or 0) <= 370 and 200 <= (found.y or 0) <= 212, found
    # Read closer, still nearly the label: not found, and nothing else clicked.
    full[0] = word("Dacu", 300, 200, 0)
    missed = resolve_point(TargetSpec(by_text="Document"), img, (0, 0), (0, 0, 1920, 1080),
                           (1.0,), 0.85, TextSettings(lambda i: full if i.size == (1920, 1080)
                                                      else [word("Dacu", 40, 10, 0)]))
    assert not missed.found and missed.error == "target_not_found"


def test_one_good_place_is_chosen_and_a_failure_says_what_was_seen() -> None:
    words = [word("Enregistrer", 100, 10, 0), word("Supprimer", 300, 10, 1)]
    d = decide(candidates(words, "Enregistrer"), "Enregistrer")
    assert d.chosen is not None and d.chosen.box == (100, 10, 88, 12)
    miss = decide(candidates(words, "Imprimer"), "Imprimer")
    assert miss.chosen is None and miss.error == "target_not_found"
    assert "seen 'Supprimer'" in (miss.detail or "")


TWINS = [word("OK", 100, 100, 0), word("OK", 900, 700, 1)]


def test_twins_without_anything_to_tell_them_apart_are_ambiguous() -> None:
    d = decide(candidates(TWINS, "OK"), "OK")
    assert d.chosen is None and d.error == "ambiguous_target"
    assert "2 places" in (d.detail or "")


def test_the_recorded_position_tells_far_twins_apart_only_when_one_is_still_there() -> None:
    found = candidates(TWINS, "OK")
    d = decide(found, "OK", recorded=(905, 705))
    assert d.chosen is not None and d.chosen.box[0] == 900 and d.tie_broken_by == "position"
    # Neither is where it was recorded: the form changed, the position proves nothing.
    assert decide(found, "OK", recorded=(500, 400)).error == "ambiguous_target"
    # Twins a row apart swap places when a form is rearranged: never by position.
    near = candidates([word("OK", 100, 100, 0), word("OK", 100, 140, 1)], "OK")
    assert decide(near, "OK", recorded=(108, 146)).error == "ambiguous_target"


def test_the_anchor_breaks_ties_and_must_agree_with_the_text() -> None:
    found = candidates(TWINS, "OK")
    d = decide(found, "OK", anchor=(880, 690, 60, 30))
    assert d.chosen is not None and d.chosen.box[0] == 900 and d.tie_broken_by == "anchor"
    # One place read, the anchor elsewhere (a twin the OCR misread?): no click.
    alone = candidates(TWINS[:1], "OK")
    assert decide(alone, "OK", anchor=(880, 690, 60, 30)).error == "ambiguous_target"


def test_reading_again_at_the_recorded_position_catches_a_misread_twin() -> None:
    chosen = Candidate("OK", 1.0, 0.9, (100, 100, 16, 12))
    assert look_again_boxes(chosen, (108, 106), (1920, 1080)) == []  # it is still there
    boxes = look_again_boxes(chosen, (600, 500), (1920, 1080))
    assert boxes and all(b[0] <= 600 <= b[0] + b[2] and b[1] <= 500 <= b[1] + b[3]
                         for b, _scale in boxes)
    again = candidates([word("OK", 596, 494, 0)], "OK")
    d = twin_seen_again(chosen, again, "OK", 0.8)
    assert d is not None and d.error == "ambiguous_target"
    assert twin_seen_again(chosen, candidates([word("Annuler", 596, 494, 0)], "OK"),
                           "OK", 0.8) is None


def test_a_word_read_unsurely_where_a_copy_could_be_is_a_near_miss() -> None:
    words = [word("OK", 100, 100, 0), word("fe)", 300, 200, 1, conf=0.55)]
    chosen = Candidate("OK", 1.0, 0.95, (100, 100, 16, 12))
    (miss,) = near_misses(words, candidates(words, "OK"), chosen, "OK", 0.8, (1920, 1080))
    left, top, w, h = miss.crop
    assert miss.read_as == "fe)" and miss.scale > 1
    assert left <= 312 <= left + w and top <= 206 <= top + h
    # Read surely as something else, far larger or smaller than the label: not a near miss.
    others = [word("OK", 100, 100, 0), word("Nom", 300, 200, 1),
              word("x", 300, 400, 2, conf=0.3, h=40), word("Traitement", 300, 500, 3, conf=0.4)]
    assert near_misses(others, candidates(others, "OK"), chosen, "OK", 0.8, (1920, 1080)) == []
    # Read like the label, one letter off: a near miss; its crop holds its whole phrase.
    save = Candidate("Enregistrer", 1.0, 0.95, (100, 100, 88, 12))
    alike = [word("Enregistrer", 100, 100, 0), word("Enregistrez", 300, 200, 1),
             word("cela", 396, 200, 1)]
    (miss,) = near_misses(alike, candidates(alike, "Enregistrer"), save, "Enregistrer", 0.95,
                          (1920, 1080))
    assert miss.crop[0] <= 300 and miss.crop[0] + miss.crop[2] >= 396 + 32


def test_a_short_label_is_not_clicked_while_a_near_miss_reads_it_again() -> None:
    """The full screen shows one "OK" and an unsure "fe)"; read closer, "fe)" is an "OK":
    no click (the bench's wrong-control click, docs/grounding.md "Near misses")."""
    img = Image.new("RGB", (1920, 1080), "white")

    def reader(closer: str) -> Callable[[Image.Image], list[Word]]:
        def read(image: Image.Image) -> list[Word]:
            if image.size == (1920, 1080):
                return [word("OK", 340, 396, 0), word("fe)", 344, 450, 1, conf=0.55)]
            return [Word(closer, 0.96, (image.width // 2 - 16, image.height // 2 - 9, 32, 18),
                         0)]
        return read

    found = resolve_point(TargetSpec(by_text="OK"), img, (0, 0), (0, 0, 1920, 1080), (1.0,),
                          0.85, TextSettings(reader("OK")))
    assert not found.found and found.error == "ambiguous_target", found
    assert "'fe)' was read unsurely" in (found.detail or "")
    # Read closer, it is something else: the one "OK" is clicked.
    found = resolve_point(TargetSpec(by_text="OK"), img, (0, 0), (0, 0, 1920, 1080), (1.0,),
                          0.85, TextSettings(reader("Nom")))
    assert found.found and (found.x, found.y) == (348, 402)


def test_a_text_target_never_falls_back_to_its_recorded_position() -> None:
    assert resolution_order(TargetSpec(by_text="OK", x_pct=0.5, y_pct=0.5)) == ["ocr"]
    assert resolution_order(TargetSpec(by_text="OK", resolve_order=["ocr", "position"])) == \
        ["ocr"]
    assert resolution_order(TargetSpec(by_text="OK", anchor_image_base64="x",
                                       resolve_order=["template", "position"])) == \
        ["template", "ocr"]
    assert resolution_order(TargetSpec(x_pct=0.5, y_pct=0.5)) == ["position"]
    img = Image.new("RGB", (200, 100), "white")
    spec = TargetSpec(by_text="Valider", x_pct=0.5, y_pct=0.5)
    none = resolve_point(spec, img, (0, 0), (0, 0, 200, 100), (1.0,), 0.85,
                         TextSettings(lambda _i: [word("Annuler", 10, 10, 0)]))
    assert not none.found and none.error == "target_not_found" and none.method == "ocr"
    no_engine = resolve_point(spec, img, (0, 0), (0, 0, 200, 100), (1.0,), 0.85,
                              TextSettings(None, unavailable="tesserocr missing"))
    assert not no_engine.found and "tesserocr missing" in (no_engine.detail or "")

    def broken(_image: Image.Image) -> list[Word]:
        raise RuntimeError("engine crashed")

    failed = resolve_point(spec, img, (0, 0), (0, 0, 200, 100), (1.0,), 0.85,
                           TextSettings(broken))
    assert failed.error == "target_not_found" and "engine crashed" in (failed.detail or "")


def test_the_point_and_box_are_offset_to_desktop_coordinates_negative_origins_too() -> None:
    img = Image.new("RGB", (1280, 1024), "white")
    words = [word("Enregistrer", 400, 300, 0)]
    found = resolve_point(TargetSpec(by_text="enregistrer"), img, (-1280, -200),
                          (-1280, -200, 1280, 1024), (1.0,), 0.85, TextSettings(lambda _i: words))
    assert found.found and found.method == "ocr" and found.score == 1.0
    assert (found.x, found.y) == (-1280 + 444, -200 + 306)
    assert found.box == (-880, 100, 88, 12)


def test_tesseract_reads_a_recorded_screen_french_accents_included() -> None:
    """The real engine on a real screen (bench/grounding_record.py): a few French labels
    are found inside the box Tk reported for their control."""
    pytest.importorskip("tesserocr")
    from agent.grounding.tesseract import TesseractReader

    labels = json.loads((DATA / "labels.json").read_text())["screens"]
    screen = next(s for s in labels if s["image"] == "fr-dejavu-125-moved.png")
    reader = TesseractReader()
    try:
        words = reader.read(Image.open(DATA / screen["image"]))
    finally:
        reader.close()
    for text in ("Enregistrer", "Notes médicales", "Cœur et vaisseaux", "Reçu à l'accueil"):
        x, y, w, h = next(c["box"] for c in screen["controls"] if c["text"] == text)
        d = decide(candidates(words, text), text)
        assert d.chosen is not None, (text, d.detail)
        cx, cy = d.chosen.centre
        assert x <= cx <= x + w and y <= cy <= y + h, (text, d.chosen)
    assert decide(candidates(words, "Valider la prescription"), "x").chosen is None


def test_a_twin_misread_on_the_full_screen_is_seen_again_where_it_was_recorded() -> None:
    """On this recorded screen Tesseract reads the second "OK" as "fe)": searching that
    one by text and recorded position must not click the first "OK"."""
    pytest.importorskip("tesserocr")
    from agent.grounding.tesseract import TesseractReader

    labels = json.loads((DATA / "labels.json").read_text())["screens"]
    screen = next(s for s in labels if s["image"] == "fr-liberation-100-recorded.png")
    _first, second = [c["box"] for c in screen["controls"] if c["text"] == "OK"]
    x, y, w, h = second
    image = Image.open(DATA / screen["image"])
    reader = TesseractReader()
    try:
        found = resolve_point(TargetSpec(by_text="OK", x_pct=(x + w / 2) / 1920,
                                         y_pct=(y + h / 2) / 1080), image, (0, 0),
                              (0, 0, 1920, 1080), (1.0,), 0.85, TextSettings(reader.read))
    finally:
        reader.close()
    if found.found:  # read right this time: then on the right one
        assert x <= (found.x or 0) <= x + w and y <= (found.y or 0) <= y + h
    else:
        assert found.error == "ambiguous_target", found


def test_the_misread_ok_is_never_clicked_by_text_alone() -> None:
    """Two "OK" on this recorded screen; Tesseract once read one of them "fe)" and the
    text alone clicked the other. By text alone, either both are read or the unsure word
    is read again: no click."""
    pytest.importorskip("tesserocr")
    from agent.grounding.tesseract import TesseractReader

    image = Image.open(DATA / "fr-liberation-100-recorded.png")
    reader = TesseractReader()
    try:
        found = resolve_point(TargetSpec(by_text="OK"), image, (0, 0), (0, 0, 1920, 1080),
                              (1.0,), 0.85, TextSettings(reader.read))
    finally:
        reader.close()
    assert not found.found and found.error == "ambiguous_target", found


def test_two_halves_read_at_once_give_each_line_once() -> None:
    """Read as two halves overlapping around row 540: the row of "Résultats d'analyses"
    (rows 504-516) is in both, and comes out once, where it is."""
    pytest.importorskip("tesserocr")
    from agent.grounding.tesseract import TesseractReader

    image = Image.open(DATA / "fr-liberation-100-moved.png")
    reader = TesseractReader(workers=2, crop_blank=False)
    try:
        words = reader.read(image)
    finally:
        reader.close()
    (row,) = [w for w in words if normalise(w.text) == "resultats"]
    assert 500 <= row.box[1] <= 516, row
    for text in ("Fichier", "Notes médicales"):  # the top half
        assert decide(candidates(words, text), text).chosen is not None, text
    assert [w.box[1] > 800 for w in words if normalise(w.text) == "sanguin"] == [True]


def test_parts_read_at_once_read_as_one_by_one_and_are_kept() -> None:
    """The second looks' crops, read by two Tesseracts at once, give each crop's own
    words; a crop read before is given again, not read."""
    pytest.importorskip("tesserocr")
    from agent.grounding.tesseract import TesseractReader

    image = Image.open(DATA / "fr-liberation-100-moved.png").convert("L")
    crops = [image.crop((x, y, x + 300, y + 60)).resize((600, 120))
             for x, y in ((280, 80), (600, 440), (300, 480), (280, 80), (1000, 600))]
    alone, together = TesseractReader(workers=1, keep=0), TesseractReader(workers=2)
    try:
        one_by_one = [alone.read(c) for c in crops]
        together.read(crops[1])
        before = together.readings
        at_once = together.read_many(crops)
        read_now = together.readings - before
    finally:
        alone.close()
        together.close()
    assert at_once == one_by_one
    assert any(at_once) and read_now == 4  # crops[1] was kept; the repeated one is read


def test_blank_margins_are_not_read_and_the_words_keep_their_place() -> None:
    """Read within the box of the screen's content (an option, off in the agent), the
    labels are found where the whole monitor's reading finds them, in the monitor's pixels
    (docs/grounding.md "Speed")."""
    pytest.importorskip("tesserocr")
    from agent.grounding.tesseract import TesseractReader

    image = Image.open(DATA / "mousepad-fr-dejavu-125-moved.png")
    whole, content = TesseractReader(), TesseractReader(crop_blank=True)
    try:
        everything, cropped = whole.read(image), content.read(image)
    finally:
        whole.close()
        content.close()
    for text in ("Fichier", "Numéro de colonne :", "Y aller", "Annuler"):
        a = decide(candidates(everything, text), text, min_score=0.8).chosen
        b = decide(candidates(cropped, text), text, min_score=0.8).chosen
        assert a is not None and b is not None, text
        # Where a click lands: a box read a bevel taller is the same place.
        assert max(abs(p - q) for p, q in zip(a.centre, b.centre, strict=True)) <= 3, (a, b)


def test_ocr_settings_from_the_environment_and_their_errors() -> None:
    cfg = DesktopConfig.from_env({"LEA_OCR_LANGS": "fra", "LEA_OCR_MIN_SCORE": "0.9",
                                  "LEA_OCR_MARGIN": "0.2", "LEA_OCR_TESSDATA": "/opt/td"})
    assert (cfg.ocr_langs, cfg.ocr_min_score, cfg.ocr_margin, cfg.ocr_tessdata) == \
        ("fra", 0.9, 0.2, "/opt/td")
    for name, value in [("LEA_OCR_MIN_SCORE", "0"), ("LEA_OCR_MARGIN", "1"),
                        ("LEA_OCR_LANGS", "fra;rm -rf")]:
        with pytest.raises(ConfigError, match=name):
            DesktopConfig.from_env({name: value})


def test_too_many_near_misses_to_read_again_is_no_click() -> None:
    """Past the cap of places to read again, a place left unchecked may be another copy:
    ``ambiguous_target``, never a click (docs/grounding.md "Near misses")."""
    img = Image.new("RGB", (1920, 1080), "white")
    unsure = [word("fe)", 344, 450 + 40 * i, 1 + i, conf=0.55) for i in range(4)]
    reads: list[tuple[int, int]] = []

    def read(image: Image.Image) -> list[Word]:
        reads.append(image.size)
        return [word("OK", 340, 396, 0), *unsure] if image.size == (1920, 1080) else []

    spec = TargetSpec(by_text="OK")
    capped = resolve_point(spec, img, (0, 0), (0, 0, 1920, 1080), (1.0,), 0.85,
                           TextSettings(read, max_near_misses=3))
    assert not capped.found and capped.error == "ambiguous_target", capped
    assert "4 places of its size" in (capped.detail or "") and reads == [(1920, 1080)]
    # Within the cap each is read again (here: nothing there), and the one "OK" is clicked.
    reads.clear()
    found = resolve_point(spec, img, (0, 0), (0, 0, 1920, 1080), (1.0,), 0.85,
                          TextSettings(read, max_near_misses=4))
    assert found.found and (found.x, found.y) == (348, 402) and len(reads) == 5


def test_the_same_pixels_are_not_read_twice() -> None:
    """A step retried on a screen that has not changed gets the words already read; a
    changed pixel is read again (docs/grounding.md "Speed")."""
    pytest.importorskip("tesserocr")
    from agent.grounding.tesseract import TesseractReader

    screen = Image.open(DATA / "fr-dejavu-125-moved.png").convert("RGB").crop((700, 0, 1500,
                                                                              300))
    reader = TesseractReader(workers=1, keep=2)
    try:
        first = reader.read(screen)
        assert reader.read(screen.copy()) == first and reader.readings == 1
        changed = screen.copy()
        changed.putpixel((5, 5), (1, 2, 3))
        assert reader.read(changed) and reader.readings == 2
    finally:
        reader.close()


def test_a_wrapped_labels_lines_stack_though_one_is_read_short() -> None:
    """A narrow button at 150 %: its first line misread, its box 11 px high, 17 px above
    the next line (16 px high)."""
    lines = [Word("Valider", 0.4, (763, 561, 63, 11), 0), Word("et", 0.95, (834, 563, 16, 9), 0),
             Word("envoyer", 0.96, (756, 589, 73, 16), 1), Word("au", 0.97, (836, 589, 21, 12), 1),
             Word("secrétariat", 0.96, (758, 608, 98, 16), 2)]
    (stack,) = stacks(lines)
    assert [w.text for w in stack] == ["Valider", "et", "envoyer", "au", "secrétariat"]
