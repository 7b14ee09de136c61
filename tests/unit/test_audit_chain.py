"""The hash chain (pure): canonical encoding, hashes, and a walk that names the first bad
record as altered, removed or inserted; and which missing images a prune explains."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.audit_log.chain import (
    GENESIS,
    Anchor,
    ChainRecord,
    canonical,
    chain_hash,
    content_bytes,
    seal,
    verify,
)
from actors.audit_log.evidence import PRUNE_KIND, Evidence


def build(n: int, start_prev: str = GENESIS, start_seq: int = 1) -> list[ChainRecord]:
    rows: list[ChainRecord] = []
    prev = start_prev
    for i in range(start_seq, start_seq + n):
        row = seal(prev, {
            "seq": i, "record_id": f"r{i}", "source": "dispatcher",
            "kind": "action_dispatched", "replay_id": "rp", "at": 1000.0 + i / 7,
            "stored_at": 2000.0 + i, "data": {"action_id": f"s{i}", "note": "é ✓", "n": i},
            "screenshots": {"before": hashlib.sha256(b"%d" % i).hexdigest()}})
        rows.append(row)
        prev = row.hash
    return rows


def forged(prev: str, seq: int, record_id: str = "forged") -> ChainRecord:
    """A record made by someone who knows the scheme (its own hash is right)."""
    return seal(prev, {"seq": seq, "record_id": record_id, "source": "dispatcher",
                       "kind": "replay_resumed", "replay_id": "rp", "at": 1.0,
                       "stored_at": 2.0, "data": {"operator": "mallory"}, "screenshots": {}})


def renumbered(rows: list[ChainRecord], delta: int) -> list[ChainRecord]:
    return [dataclasses.replace(r, seq=r.seq + delta) for r in rows]


def test_canonical_encoding_is_one_byte_string_per_value() -> None:
    a = canonical({"b": [1, 2.5, None, True], "a": "é", "c": {"y": 1, "x": 0}})
    b = canonical({"c": {"x": 0, "y": 1}, "a": "é", "b": [1, 2.5, None, True]})
    assert a == b
    assert a == '{"a":"é","b":[1,2.5,null,true],"c":{"x":0,"y":1}}'.encode()
    assert canonical(json.loads(a)) == a  # what is stored reads back to the same bytes
    with pytest.raises(ValueError):
        canonical({"x": math.nan})


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(value=_json)
def test_canonical_is_the_json_dumps_form_chains_were_sealed_with(value: object) -> None:
    """One encoder made once gives the same bytes as ``json.dumps`` with the same options at
    each call (how canonical was first written): every chain sealed so far still verifies."""
    try:
        expected = json.dumps(value, sort_keys=True, separators=(",", ":"),
                              ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: refused either way
        with pytest.raises(UnicodeEncodeError):
            canonical(value)
        return
    assert canonical(value) == expected


@settings(max_examples=150, deadline=None)
@given(seq=st.integers(1, 2**62), record_id=st.text(min_size=1), kind=st.text(),
       source=st.text(), replay_id=st.none() | st.text(),
       at=st.floats(allow_nan=False, allow_infinity=False),
       stored_at=st.floats(allow_nan=False, allow_infinity=False),
       data=st.dictionaries(st.text(), _json, max_size=5),
       screenshots=st.dictionaries(st.text(max_size=8), st.text(max_size=64), max_size=3))
def test_the_fast_content_encoding_is_the_canonical_one(
        seq: int, record_id: str, kind: str, source: str, replay_id: str | None, at: float,
        stored_at: float, data: dict[str, object], screenshots: dict[str, str]) -> None:
    content = {"seq": seq, "record_id": record_id, "source": source, "kind": kind,
               "replay_id": replay_id, "at": at, "stored_at": stored_at, "data": data,
               "screenshots": screenshots}
    try:
        expected = canonical(content)
    except UnicodeEncodeError:  # lone surrogates: refused before they reach the store
        return
    assert content_bytes(**{**content, "data": canonical(data),  # type: ignore[arg-type]
                            "screenshots": canonical(screenshots)}) == expected


def test_hash_is_sha256_of_previous_hash_bytes_then_content() -> None:
    content = canonical({"k": 1})
    assert chain_hash(GENESIS, content) == hashlib.sha256(bytes(32) + content).hexdigest()
    rows = build(2)
    assert rows[1].prev_hash == rows[0].hash
    assert rows[1].hash == hashlib.sha256(
        bytes.fromhex(rows[0].hash) + canonical(rows[1].content())).hexdigest()


def test_an_intact_chain_verifies_with_its_head() -> None:
    rows = build(50)
    verdict = verify(rows)
    assert verdict.intact and verdict.records == 50
    assert (verdict.head_seq, verdict.head_hash) == (50, rows[-1].hash)
    assert verify([]).intact


@pytest.mark.parametrize("change", [
    {"data": {"action_id": "s7", "note": "é ✓", "n": 8}},
    {"kind": "action_reported"},
    {"at": 1000.0 + 7 / 7 + 1e-9},
    {"screenshots": {"before": "0" * 64}},
    {"hash": "f" * 64},
    {"problem": "data is not in canonical form"},
])
def test_an_altered_record_is_named(change: dict[str, object]) -> None:
    rows = build(20)
    rows[6] = dataclasses.replace(rows[6], **change)  # type: ignore[arg-type]
    broken = verify(rows).broken
    assert broken is not None
    assert (broken.seq, broken.record_id, broken.reason) == (7, "r7", "altered")


def test_a_record_rewritten_with_a_fresh_hash_breaks_the_next_link() -> None:
    rows = build(20)
    rows[6] = forged(rows[5].hash, 7, "r7")
    broken = verify(rows).broken
    assert broken is not None and (broken.seq, broken.reason) == (8, "removed")
    assert "seq 7 (record_id r7) was rewritten" in broken.detail


def test_a_removed_record_is_named_by_the_gap() -> None:
    rows = build(20)
    del rows[9]  # seq 10
    broken = verify(rows).broken
    assert broken is not None
    assert (broken.seq, broken.record_id, broken.reason) == (11, "r11", "removed")
    assert "seq 10 missing" in broken.detail


def test_removed_records_renumbered_are_still_found() -> None:
    rows = build(20)
    rows = rows[:9] + renumbered(rows[11:], -2)  # seq 10 and 11 gone, the rest shifted
    broken = verify(rows).broken
    assert broken is not None and (broken.seq, broken.reason) == (10, "removed")
    assert broken.record_id == "r12"


def test_the_first_record_removed() -> None:
    broken = verify(build(5)[1:]).broken
    assert broken is not None and (broken.seq, broken.reason) == (2, "removed")


def test_records_cut_off_the_end_need_an_anchor() -> None:
    rows = build(20)
    anchor = Anchor(20, rows[-1].hash)
    assert verify(rows[:-3]).intact  # a chain alone cannot tell
    broken = verify(rows[:-3], anchors=[anchor]).broken
    assert broken is not None and (broken.seq, broken.reason) == (18, "removed")
    assert verify(rows, anchors=[anchor, Anchor(3, rows[2].hash)]).anchors_checked == 2


def test_an_anchor_that_does_not_match_means_the_history_was_rewritten() -> None:
    rows = build(10)
    rewritten = [*rows[:4], forged(rows[3].hash, 5)]
    for seq in range(6, 11):
        rewritten.append(forged(rewritten[-1].hash, seq, f"x{seq}"))
    assert verify(rewritten).intact
    broken = verify(rewritten, anchors=[Anchor(7, rows[6].hash)]).broken
    assert broken is not None and (broken.seq, broken.reason) == (7, "altered")


def test_an_inserted_record_is_named_when_forged_well() -> None:
    rows = build(20)
    fake = forged(rows[4].hash, 6)  # between seq 5 and the old seq 6, the rest shifted up
    rows = [*rows[:5], fake, *renumbered(rows[5:], +1)]
    broken = verify(rows).broken
    assert broken is not None
    assert (broken.seq, broken.record_id, broken.reason) == (6, "forged", "inserted")


def test_an_inserted_record_is_named_when_forged_badly() -> None:
    rows = build(20)
    fake = dataclasses.replace(forged(rows[4].hash, 6), prev_hash="1" * 64, hash="2" * 64)
    rows = [*rows[:5], fake, *renumbered(rows[5:], +1)]
    broken = verify(rows).broken
    assert broken is not None
    assert (broken.seq, broken.record_id, broken.reason) == (6, "forged", "inserted")


def test_an_inserted_first_record() -> None:
    rows = build(5)
    fake = forged(GENESIS, 1)
    broken = verify([fake, *renumbered(rows, +1)]).broken
    assert broken is not None and (broken.record_id, broken.reason) == ("forged", "inserted")


def test_a_segment_verifies_on_its_own_from_its_first_link() -> None:
    rows = build(30)
    segment = rows[10:]
    assert not verify(segment).intact
    verdict = verify(segment, start_prev=segment[0].prev_hash, start_seq=segment[0].seq)
    assert verdict.intact and verdict.records == 20 and verdict.first_seq == 11


def test_anchor_parsing() -> None:
    digest = "ab" * 32
    assert Anchor.parse(f"12:{digest}") == Anchor(12, digest)
    for bad in ("12", f"x:{digest}", "12:abc", f"12:{'zz' * 32}"):
        with pytest.raises(ValueError):
            Anchor.parse(bad)


def _prune(seq: int, cutoff: float) -> ChainRecord:
    return seal(GENESIS, {"seq": seq, "record_id": f"p{seq}", "source": "audit_log",
                          "kind": PRUNE_KIND, "replay_id": None, "at": cutoff,
                          "stored_at": cutoff, "data": {"cutoff": cutoff},
                          "screenshots": {}})


def test_missing_images_are_fine_only_when_a_later_prune_covers_them() -> None:
    rows = build(4)  # stored_at 2001..2004, one image each
    evidence = Evidence()
    for row in [*rows[:3], _prune(10, 2002.5), rows[3]]:
        evidence.add(row)
    digests = [r.screenshots["before"] for r in rows]
    assert [evidence.pruned(d) for d in digests] == [True, True, False, False]
    problems = evidence.problems({d: "missing" for d in digests})
    assert [p.reference.record_id for p in problems] == ["r3", "r4"]
    problems = evidence.problems({digests[0]: "corrupt", digests[2]: "ok", digests[3]: "ok",
                                  digests[1]: "missing"})
    assert [(p.reference.record_id, p.state) for p in problems] == [("r1", "corrupt")]
    assert "changed" in problems[0].describe()
    again = dataclasses.replace(rows[3], seq=11, record_id="r11", stored_at=2011.0,
                                screenshots={"before": digests[0]})
    evidence.add(again)  # referenced again after the prune: its file must be back
    assert not evidence.pruned(digests[0])
