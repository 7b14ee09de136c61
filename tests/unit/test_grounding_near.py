"""Which of several identical controls, by the text of its row or block
(agent/grounding/near.py; docs/grounding.md, "Which row")."""

from __future__ import annotations

from agent.grounding.near import by_row
from agent.grounding.text import Word, candidates


def word(text: str, x: int, y: int, line: int, w: int | None = None) -> Word:
    return Word(text, 0.96, (x, y, w or 7 * len(text), 11), line)


def test_a_row_text_read_whole_and_in_part_is_one_place() -> None:
    """"Bertrand" alone scores 0.8 against "Dr Bertrand": the same words twice, not two
    places (before: ``ambiguous_target``, "1 places read like 'Répondre' on rows of")."""
    words = [word("Dr", 290, 307, 0, 15), word("Bertrand", 311, 307, 0, 61),
             word("Répondre", 289, 341, 1),
             word("Dr", 290, 555, 2, 15), word("Fournier", 311, 555, 2, 58),
             word("Répondre", 289, 590, 3)]
    decision = by_row(candidates(words, "Répondre"), words, "Répondre", "Dr Bertrand", 0.8,
                      0.15)
    assert decision.chosen is not None and decision.chosen.box[1] == 341, decision


def test_two_places_of_the_row_text_still_choose_nothing() -> None:
    words = [word("Dr", 290, 307, 0, 15), word("Bertrand", 311, 307, 0, 61),
             word("Répondre", 289, 341, 1), word("Dr", 290, 555, 2, 15),
             word("Bertrand", 311, 555, 2, 61), word("Répondre", 289, 590, 3)]
    decision = by_row(candidates(words, "Répondre"), words, "Répondre", "Dr Bertrand", 0.8,
                      0.15)
    assert decision.chosen is None and decision.error == "ambiguous_target", decision
