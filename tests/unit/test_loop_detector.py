"""The loop detector's core: the 8 cases of the origin plan, adapted, and its bounds.

Screens are real images (PNG/JPEG bytes) measured by the real pixel embedder. The only
stand-in is an embedder that raises, as a model running out of memory would.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageDraw

from actors.loop_detector.config import LoopConfig
from actors.loop_detector.core import LoopDetectorCore
from actors.loop_detector.pixel import BadScreenshot, PixelEmbedder
from messages import events
from messages.codec import MessageError, decode, encode
from messages.loop import LoopVerdict, ObserveStep


def screen(text: str = "", size: tuple[int, int] = (320, 200), clock: int | None = None,
           fmt: str = "PNG") -> bytes:
    """A small window: a title bar, a field holding ``text``, optionally a clock."""
    image = Image.new("RGB", size, (236, 239, 244))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, size[0], 14), fill=(40, 70, 120))
    draw.rectangle((20, 60, 300, 80), fill=(255, 255, 255), outline=(90, 90, 90))
    draw.text((24, 64), text, fill=(0, 0, 0))
    if clock is not None:
        draw.text((250, 185), f"12:{clock // 60 % 60:02d}:{clock % 60:02d}", fill=(0, 0, 0))
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


def step(i: int, shot: bytes | None = None, replay: str = "r1", **fields: Any) -> ObserveStep:
    """The i-th step of a replay: by default a successful click on its own button."""
    values: dict[str, Any] = {
        "replay_id": replay, "session_id": "s1", "action_id": f"a{i}",
        "base_action_id": f"a{i}", "action_type": "click", "target": {"by_text": f"b{i}"},
        "success": True, "screenshot_after": shot}
    values.update(fields)
    return ObserveStep.model_validate(values)


def core(**config: Any) -> LoopDetectorCore:
    return LoopDetectorCore(LoopConfig(**config), PixelEmbedder())


def verdicts(c: LoopDetectorCore, steps: list[ObserveStep]) -> list[LoopVerdict]:
    return [c.observe(s).verdict for s in steps]


class Exploding:
    """A clip embedder whose model fails at every call (CUDA OOM, corrupt weights...)."""

    name = "clip"
    ready = True

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, data: bytes) -> Any:
        self.calls += 1
        raise RuntimeError("CUDA out of memory")


# The 8 cases of the origin plan ------------------------------------------------------------

def test_screen_static_triggers_after_n_identical_captures() -> None:
    same = screen("Dupont")
    out = verdicts(core(), [step(i, same) for i in range(4)])
    assert [v.detected for v in out] == [False, False, False, True]
    assert out[3].signal == "screen_static" and out[3].reason == "loop_detected"
    assert out[3].evidence["captures"] == 4


def test_screen_static_skipped_while_history_is_too_short() -> None:
    same = screen("Dupont")
    assert not any(v.detected for v in verdicts(core(), [step(i, same) for i in range(3)]))
    # N is configurable (RPA_LOOP_SCREEN_STATIC_N).
    out = verdicts(core(screen_static_n=6), [step(i, same) for i in range(6)])
    assert [v.detected for v in out] == [False] * 5 + [True]


def test_action_repeat_triggers_on_n_identical_actions() -> None:
    same = {"action_type": "click", "target": {"by_text": "Valider"}}
    out = verdicts(core(), [step(i, **same) for i in range(3)])
    assert [v.detected for v in out] == [False, False, True]
    assert out[2].signal == "action_repeat"
    assert out[2].evidence == {"count": 3, "action": "click Valider", "screen_changed": "unknown"}


def test_action_repeat_skipped_when_actions_differ() -> None:
    positions = [{"x_pct": 0.1, "y_pct": 0.1}, {"x_pct": 0.2, "y_pct": 0.2},
                 {"x_pct": 0.3, "y_pct": 0.3}]
    out = verdicts(core(), [step(i, target=None, actual_position=p)
                            for i, p in enumerate(positions)])
    assert not any(v.detected for v in out)


def test_retry_threshold_triggers_at_three_retries() -> None:
    c = core()
    failing = {"success": False, "error": "target_not_found", "base_action_id": "a1"}
    assert not c.observe(step(1, retry_count=2, **failing)).verdict.detected
    verdict = c.observe(step(1, retry_count=3, action_id="a1_retry2", **failing)).verdict
    assert verdict.detected and verdict.signal == "retry_threshold"
    assert verdict.evidence == {"action_id": "a1", "retries": 3, "threshold": 3,
                                "error": "target_not_found"}
    # A retry that worked is no loop.
    assert not c.observe(step(2, retry_count=5)).verdict.detected


def test_kill_switch_disables_every_signal_and_computes_nothing() -> None:
    config, problems = LoopConfig.from_env({"RPA_LOOP_DETECTOR_ENABLED": "0"})
    assert problems == [] and config.enabled is False
    c = LoopDetectorCore(config, PixelEmbedder())
    same = screen("Dupont")
    looping = [step(i, same, target={"by_text": "Valider"}, success=i % 2 == 0,
                    retry_count=10) for i in range(10)]
    assert not any(v.detected for v in verdicts(c, looping))
    assert c.replays == 0  # no ring was even created


def test_embedder_unavailable_skips_signal_a_and_b_c_go_on() -> None:
    c = LoopDetectorCore(LoopConfig(embedder="clip"), PixelEmbedder())
    notices = c.clip_unavailable("checkpoint '/nope.pt' is not a file", fallback=False)
    assert [n.topic for n in notices] == [events.LOOP_EMBEDDER_UNAVAILABLE]
    assert notices[0].data["effect"] == "screen_static disabled"
    same = screen("Dupont")
    assert not any(v.detected for v in verdicts(c, [step(i, same) for i in range(6)]))
    verdict = c.observe(step(9, success=False, retry_count=3)).verdict
    assert verdict.signal == "retry_threshold"
    out = verdicts(c, [step(20 + i, same, target={"by_text": "OK"}) for i in range(3)])
    assert out[-1].signal == "action_repeat"
    assert out[-1].evidence["screen_changed"] == "no"  # the pixel measure still serves B


def test_embedder_exception_does_not_crash_and_b_c_go_on() -> None:
    exploding = Exploding()
    c = LoopDetectorCore(LoopConfig(embedder="clip"), PixelEmbedder(), exploding)
    same = screen("Dupont")
    outcomes = [c.observe(step(i, same)) for i in range(6)]
    assert exploding.calls == 6
    assert not any(o.verdict.detected for o in outcomes)
    notices = [n for o in outcomes for n in o.notices]
    assert [n.topic for n in notices] == [events.LOOP_EMBEDDER_UNAVAILABLE]  # once
    assert c.failures == 6
    verdict = c.observe(step(9, same, success=False, retry_count=4)).verdict
    assert verdict.signal == "retry_threshold"
    out = verdicts(c, [step(20 + i, same, target={"by_text": "OK"}) for i in range(3)])
    assert out[-1].signal == "action_repeat"


# Beyond the spec --------------------------------------------------------------------------

def test_progress_in_one_field_is_not_a_loop() -> None:
    """A few characters typed at each step change a few tiles only: progress."""
    frames = [screen("Dupont Jean"[:k]) for k in range(2, 12)]
    assert not any(v.detected for v in verdicts(core(), [step(i, f)
                                                          for i, f in enumerate(frames)]))


def test_ticking_clock_alone_is_a_loop() -> None:
    frames = [screen("Dupont", clock=s) for s in range(0, 80, 7)]
    out = verdicts(core(), [step(i, f) for i, f in enumerate(frames)])
    first = next(i for i, v in enumerate(out) if v.detected)
    assert out[first].signal == "screen_static"
    assert first <= 6  # the clock's first tick counts as progress until it ticks again


def test_same_key_three_times_with_focus_moving_is_not_action_repeat() -> None:
    tab = {"action_type": "key_combo", "target": None, "parameters": {"keys": ["tab"]}}
    moving = [screen("x" * k) for k in (1, 4, 8)]
    assert not any(v.detected for v in verdicts(core(), [step(i, f, **tab)
                                                          for i, f in enumerate(moving)]))
    frozen = screen("frozen")
    out = verdicts(core(), [step(i, frozen, **tab) for i in range(3)])
    assert out[-1].signal == "action_repeat"
    assert out[-1].evidence == {"count": 3, "action": "key_combo", "screen_changed": "no"}


def test_waits_are_observations_verify_steps_are_not() -> None:
    """Waiting for a screen that never comes is stuck: waits count as captures
    for screen_static, never toward action_repeat; a verify_screen is not judged."""
    same = screen("Dupont")
    waits = [step(i, same, action_type="wait", target=None,
                  parameters={"duration_ms": 100}) for i in range(4)]
    out = verdicts(core(), waits)
    assert [v.detected for v in out] == [False, False, False, True]
    assert out[3].signal == "screen_static" and out[3].evidence["last_step"] == "wait"
    verifies = [step(i, same, action_type="verify_screen", target=None) for i in range(8)]
    assert not any(v.detected for v in verdicts(core(), verifies))


def test_a_window_appearing_during_waits_is_progress() -> None:
    out = verdicts(core(), [step(0, screen("Dupont"), action_type="wait", target=None,
                                 parameters={"duration_ms": 100}),
                            *[step(i, screen("Dupont" if i % 2 else "Une fenêtre s'ouvre"),
                                   action_type="wait", target=None,
                                   parameters={"duration_ms": 100}) for i in range(1, 4)]])
    assert not any(v.detected for v in out)


def test_after_a_positive_verdict_fresh_evidence_is_needed() -> None:
    c, same = core(), screen("Dupont")
    out = verdicts(c, [step(i, same) for i in range(8)])
    assert [v.detected for v in out] == [False, False, False, True, False, False, True, False]


def test_rings_are_bounded_forgotten_and_lru() -> None:
    c = core(max_replays=3)
    for r in range(5):
        c.observe(step(0, screen(f"r{r}"), replay=f"r{r}"))
    assert c.replays == 3
    assert (c.evicted, c.last_evicted) == (2, "r1")  # counted for the shell to log
    assert c.forget("r0") is False  # least recently observed: already evicted
    assert c.forget("r4") is True
    assert c.replays == 2
    c2 = core(ring_size=5)
    verdict = [c2.observe(step(i, screen("x" * i))).verdict for i in range(40)]
    assert not any(v.detected for v in verdict)  # one more character each time
    rings = c2._replays["r1"]
    assert len(rings.screen.frames) == len(rings.steps) == len(rings.vectors) == 5
    assert len(rings.screen.transitions) == 4


def test_bad_screenshot_is_refused_before_anything_changes() -> None:
    c = core()
    good = screen("Dupont")
    with pytest.raises(BadScreenshot):
        c.observe(step(0, good[: len(good) // 2]))  # a PNG cut in half
    assert c.replays == 0
    with pytest.raises(BadScreenshot):
        c.observe(step(0, b"\x89PNG\r\n\x1a\n" + b"\x00" * 64))
    assert c.replays == 0


def test_observe_step_accepts_only_png_or_jpeg() -> None:
    with pytest.raises(ValueError, match="PNG or JPEG"):
        step(0, b"GIF89a....")
    jpeg = screen("Dupont", fmt="JPEG")
    roundtrip = decode(encode(step(0, jpeg))).body
    assert isinstance(roundtrip, ObserveStep) and roundtrip.screenshot_after == jpeg
    body = encode(step(0, jpeg)).replace(b"loop.observe", b"loop.observx")
    with pytest.raises(MessageError):
        decode(body)


def test_a_new_screen_size_starts_the_history_again() -> None:
    c = core()
    out = verdicts(c, [step(0, screen("a")), step(1, screen("a")), step(2, screen("a")),
                       step(3, screen("a", size=(640, 400)))])
    assert not any(v.detected for v in out)


def test_pause_message_reads_as_the_spec_says() -> None:
    verdict = LoopVerdict(detected=True, reason="loop_detected", signal="screen_static",
                          evidence={"captures": 4, "ignored_tiles": 6, "embedder": "pixel"})
    assert verdict.pause_message() == (
        "Léa semble bloquée — screen_static (captures=4, ignored_tiles=6, embedder=pixel)")


def test_config_keeps_the_spec_names_and_defaults_and_ignores_bad_values() -> None:
    config, problems = LoopConfig.from_env({})
    assert (config.enabled, config.screen_static_threshold, config.screen_static_n,
            config.action_repeat_n, config.retry_threshold) == (True, 0.99, 4, 3, 3)
    assert (config.ring_size, config.embedder, config.clip_model) == (5, "auto", "ViT-B-32")
    config, problems = LoopConfig.from_env({
        "RPA_LOOP_SCREEN_STATIC_N": "7", "RPA_LOOP_ACTION_REPEAT_N": "lots",
        "RPA_LOOP_SCREEN_STATIC_THRESHOLD": "1.5", "RPA_LOOP_EMBEDDER": "CLIP"})
    assert config.screen_static_n == 7 and config.ring_size == 7  # the ring holds the run
    assert config.action_repeat_n == 3 and config.screen_static_threshold == 0.99
    assert config.embedder == "clip"
    assert len(problems) == 2 and all("ignored" in p for p in problems)


def test_pixel_frame_of_a_jpeg_and_a_png_agree() -> None:
    png, jpeg = screen("Dupont", size=(1920, 1080)), screen("Dupont", size=(1920, 1080),
                                                           fmt="JPEG")
    a, b = PixelEmbedder().frame(png), PixelEmbedder().frame(jpeg)
    assert a.shape == b.shape == (270, 480)
    assert int(np.abs(a.astype(int) - b.astype(int)).max()) <= PixelEmbedder().params.level


def test_the_same_report_observed_twice_changes_nothing() -> None:
    """A retried request (same action_id) gets the same answer and adds no capture."""
    c, same = core(), screen("Dupont")
    out = verdicts(c, [step(0, same), step(1, same), step(1, same), step(1, same),
                       step(2, same), step(3, same)])
    assert [v.detected for v in out] == [False, False, False, False, False, True]
    assert verdicts(c, [step(3, same)])[0] == out[-1]


def test_a_replay_keeps_nothing_until_it_performs_an_input_or_loops() -> None:
    """Waits and failures below the threshold keep no rings (nor evict another replay's);
    a retry_threshold verdict does, so that a retried request gets it again, event-free."""
    c = core(max_replays=1)
    c.observe(step(0, screen("Dupont"), replay="busy"))
    for i in range(3):
        wait = step(i, None, "idle", action_type="wait", target=None)
        assert not c.observe(wait).verdict.detected
        assert not c.observe(step(i, None, "idle", success=False, retry_count=1)).verdict.detected
    assert c.replays == 1 and c.evicted == 0 and c.forget("idle") is False
    failing = step(9, None, "idle", success=False, error="target_not_found", retry_count=3)
    first = c.observe(failing)
    assert first.verdict.signal == "retry_threshold"
    assert [n.topic for n in first.notices] == [events.LOOP_DETECTED]
    again = c.observe(failing)
    assert again.verdict == first.verdict and again.notices == []
    assert c.replays == 1 and c.last_evicted == "busy"
