"""Which monitor and which pixel the desktop executor acts on (no screen needed)."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image, ImageDraw

from actors.monitor_router.core import AgentScreen, resolve
from agent.executors.desktop_config import ConfigError, DesktopConfig
from agent.executors.desktop_frames import encode_screenshot, screen_changed
from agent.executors.desktop_target import (
    blind_elsewhere,
    point_at_pct,
    resolve_point,
    routed_here,
    target_area,
)
from messages.dispatch import DispatchAction, DispatchMeta
from messages.monitor import COMPOSITE, Monitor, MonitorResolution, ResolveMonitor
from messages.workflow import Action, TargetSpec

# A monitor left of the primary (Windows): negative origin.
MONITORS = [Monitor(idx=0, x=0, y=0, w=1920, h=1080, primary=True),
            Monitor(idx=1, x=-1280, y=-200, w=1280, h=1024)]
DESKTOP = (-1280, -200, 3200, 1280)


def test_the_dispatch_resolution_wins() -> None:
    res = MonitorResolution(idx=1, offset_x=-1280, offset_y=-200, w=1280, h=1024,
                            source="focus")
    area = target_area(res, 0, MONITORS, DESKTOP)
    assert (area.idx, area.rect, area.source) == (1, (-1280, -200, 1280, 1024), "focus")


def test_a_composite_resolution_is_the_whole_desktop_for_an_action_naming_no_monitor() -> None:
    for reason in ("no_focus", "invalid_index", "no_geometry"):
        res = COMPOSITE.model_copy(update={"reason": reason})
        area = target_area(res, None, MONITORS, DESKTOP)
        assert (area.rect, area.error) == (DESKTOP, None)


def test_an_invalid_index_is_refused_never_the_composite() -> None:
    res = COMPOSITE.model_copy(update={"reason": "invalid_index"})
    area = target_area(res, 7, MONITORS, DESKTOP)
    assert area.error is not None and area.error.startswith("monitor_unavailable: ")
    assert "monitor 7" in area.error and "0..15" in area.error
    assert target_area(res, None, MONITORS, DESKTOP, MONITORS[1]).error is not None


def test_a_router_without_our_monitors_yields_to_the_agent_geometry() -> None:
    res = MonitorResolution(idx=-1, offset_x=0, offset_y=0, w=0, h=0,
                            source="composite_fallback", reason="no_heartbeat")
    area = target_area(res, 1, MONITORS, DESKTOP)
    assert (area.idx, area.rect, area.source) == (1, (-1280, -200, 1280, 1024), "action")


def test_without_resolution_the_action_monitor_else_refused() -> None:
    assert target_area(None, 1, MONITORS, DESKTOP).rect == (-1280, -200, 1280, 1024)
    assert target_area(None, 7, MONITORS, DESKTOP).error is not None  # no such screen
    assert target_area(None, None, MONITORS, DESKTOP).source == "composite_fallback"
    assert target_area(None, None, [], DESKTOP).rect == DESKTOP  # names none: the composite


@pytest.mark.parametrize("res", [None, COMPOSITE.model_copy(update={"reason": "no_geometry"}),
                                 COMPOSITE.model_copy(update={"reason": "no_heartbeat"})])
def test_a_named_monitor_on_an_agent_that_cannot_list_its_monitors_is_refused(
        res: MonitorResolution | None) -> None:
    for index, recorded in ((1, None), (None, MONITORS[1]), (0, MONITORS[0])):
        area = target_area(res, index, [], DESKTOP, recorded)
        assert area.error is not None and "cannot be listed" in area.error, (index, area)


# The recorded screen unplugged, a new one now has its number.
RECORDED = Monitor(idx=1, x=1920, y=0, w=1920, h=1080, name="DELL-P2419")
RENUMBERED = [Monitor(idx=0, x=0, y=0, w=1920, h=1080, primary=True),
              Monitor(idx=1, x=1920, y=0, w=2560, h=1440, name="LG-27")]
GONE = MonitorResolution(idx=-1, offset_x=0, offset_y=0, w=0, h=0,
                         source="composite_fallback", reason="recorded_monitor_unavailable")


def test_a_screen_the_router_refused_is_never_taken_for_its_number() -> None:
    area = target_area(GONE, 1, RENUMBERED, (0, 0, 4480, 1440), RECORDED)
    assert area.error is not None and area.error.startswith("monitor_unavailable")
    # Without a recorded geometry the number alone cannot be trusted either.
    assert target_area(GONE, 1, RENUMBERED, (0, 0, 4480, 1440)).error is not None


def test_the_recorded_screen_is_found_again_by_geometry_wherever_it_is() -> None:
    moved = [Monitor(idx=0, x=0, y=0, w=1920, h=1080, primary=True),
             Monitor(idx=1, x=1920, y=0, w=2560, h=1440, name="LG-27"),
             Monitor(idx=2, x=1920, y=0, w=1920, h=1080, name="DELL-P2419")]
    for res in (GONE, None, COMPOSITE.model_copy(update={"reason": "no_heartbeat"})):
        area = target_area(res, 1, moved, (0, 0, 4480, 1440), RECORDED)
        assert (area.idx, area.rect, area.error) == (2, (1920, 0, 1920, 1080), None)


def test_a_router_that_did_not_know_is_replaced_by_the_same_rule() -> None:
    res = COMPOSITE.model_copy(update={"reason": "router_unavailable"})
    area = target_area(res, 1, RENUMBERED, (0, 0, 4480, 1440), RECORDED)
    assert area.error is not None  # recorded 1920x1080 DELL: not the LG now at index 1


def test_percentages_are_offset_into_desktop_coordinates() -> None:
    rect = (-1280, -200, 1280, 1024)
    assert point_at_pct(rect, 0.5, 0.5) == (-640, 312)
    assert point_at_pct(rect, 0.0, 0.0) == (-1280, -200)
    assert point_at_pct(rect, 1.0, 1.0) == (-1, 823)  # the last pixel, not the next monitor


def monitor_image() -> tuple[Image.Image, tuple[int, int, int, int]]:
    img = Image.new("RGB", (1280, 1024), (240, 240, 240))
    d = ImageDraw.Draw(img)
    d.rectangle((300, 400, 420, 440), fill=(30, 90, 200), outline=(0, 0, 0), width=2)
    d.text((320, 412), "Imagerie", fill=(255, 255, 255))
    d.ellipse((800, 100, 860, 160), fill=(200, 30, 30))
    return img, (300, 400, 421, 441)


def b64(image: Image.Image) -> str:
    out = io.BytesIO()
    image.save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


def test_anchor_found_on_a_negative_origin_monitor_is_offset() -> None:
    img, box = monitor_image()
    spec = TargetSpec(anchor_image_base64=b64(img.crop(box)))
    found = resolve_point(spec, img, (-1280, -200), (-1280, -200, 1280, 1024), (1.0,), 0.85)
    assert found.found and found.method == "template_match"
    assert (found.x, found.y) == (-1280 + 360, -200 + 420)


def test_anchor_not_found_does_not_fall_back_to_position_unless_asked() -> None:
    img, _box = monitor_image()
    absent = Image.new("RGB", (60, 30), "white")
    ImageDraw.Draw(absent).line((0, 0, 60, 30), fill=(0, 160, 0), width=4)
    spec = TargetSpec(anchor_image_base64=b64(absent), x_pct=0.5, y_pct=0.5)
    found = resolve_point(spec, img, (0, 0), (0, 0, 1280, 1024), (1.0,), 0.85)
    assert not found.found and found.error == "target_not_found"
    asked = spec.model_copy(update={"resolve_order": ["ocr", "template", "position"]})
    fallback = resolve_point(asked, img, (0, 0), (0, 0, 1280, 1024), (1.0,), 0.85)
    assert (fallback.x, fallback.y, fallback.method) == (640, 512, "position_fallback")


def test_nothing_to_resolve_is_target_not_found_and_says_why() -> None:
    img, _box = monitor_image()
    found = resolve_point(TargetSpec(vlm_description="Imagerie", resolve_order=["vlm", "uia"]),
                          img, (0, 0), (0, 0, 1280, 1024), (1.0,), 0.85)
    assert found.error == "target_not_found" and found.detail is not None
    assert "vlm, uia" in found.detail
    assert resolve_point(None, img, (0, 0), (0, 0, 1, 1), (1.0,), 0.85).error == \
        "target_not_found"


def test_a_bad_anchor_is_invalid_not_absent() -> None:
    img, _box = monitor_image()
    found = resolve_point(TargetSpec(anchor_image_base64="%%%"), img, (0, 0),
                          (0, 0, 1280, 1024), (1.0,), 0.85)
    assert found.error == "invalid_target_spec"


def test_config_from_env_and_its_errors() -> None:
    cfg = DesktopConfig.from_env({"RPA_HUMAN_CORRECTION_TIMEOUT_S": "5",
                                  "LEA_DESKTOP_SCREENSHOT_FORMAT": "PNG",
                                  "LEA_DESKTOP_ANCHOR_SCALES": "1.0, 1.25"})
    assert (cfg.correction_timeout_s, cfg.screenshot_format, cfg.anchor_scales) == \
        (5.0, "png", (1.0, 1.25))
    assert DesktopConfig.from_env({}) == DesktopConfig()
    assert DesktopConfig().correction_timeout_s == 120.0
    for name, value in [("RPA_HUMAN_CORRECTION_TIMEOUT_S", "soon"),
                        ("LEA_DESKTOP_SCREENSHOT_FORMAT", "gif"),
                        ("LEA_DESKTOP_ANCHOR_MIN_SCORE", "2"),
                        ("LEA_DESKTOP_ANCHOR_SCALES", "0,1")]:
        with pytest.raises(ConfigError, match=name):
            DesktopConfig.from_env({name: value})


def test_screenshots_are_capped_and_changes_need_more_than_a_few_pixels() -> None:
    img, _box = monitor_image()
    jpeg = encode_screenshot(img, DesktopConfig(screenshot_max_side=640))
    assert Image.open(io.BytesIO(jpeg)).size == (640, 512)
    assert Image.open(io.BytesIO(jpeg)).format == "JPEG"
    caret = img.copy()
    caret.putpixel((5, 5), (0, 0, 0))
    assert not screen_changed(img, caret)
    menu = img.copy()
    ImageDraw.Draw(menu).rectangle((500, 500, 700, 560), fill=(255, 255, 255),
                                   outline=(0, 0, 0))
    assert screen_changed(img, menu)


def test_a_recorded_position_is_not_placed_on_the_focus_fallback() -> None:
    from agent.executors.desktop_target import Area, blind_elsewhere
    from messages.workflow import Action

    focus = Area(1, (1920, 0, 2560, 1440), "focus", "recorded_monitor_unavailable")
    at = Action.model_validate({"action_id": "c", "type": "click",
                                "target_spec": {"x_pct": 0.5, "y_pct": 0.5}})
    anchor = Action.model_validate({"action_id": "c", "type": "click",
                                    "target_spec": {"anchor_image_base64": "AAAA"}})
    keys = Action.model_validate({"action_id": "k", "type": "key_combo",
                                  "parameters": {"keys": ["ctrl", "s"]}})
    assert blind_elsewhere(at, focus) is not None
    assert blind_elsewhere(anchor, focus) is None and blind_elsewhere(keys, focus) is None
    assert blind_elsewhere(at, Area(1, (1920, 0, 2560, 1440), "action", None)) is None


def _routed_dispatch(index: int | None, recorded: Monitor | None = None) -> DispatchAction:
    action = Action.model_validate({
        "action_id": "s1", "type": "click", "monitor_index": index,
        "monitor_geometry": None if recorded is None else recorded.model_dump(),
        "target_spec": {"x_pct": 0.5, "y_pct": 0.5}})
    return DispatchAction(replay_id="r1", session_id="s", machine_id="m1", action=action,
                          attempt_id="a1", dispatch_meta=DispatchMeta(first_dispatched_at=0.0),
                          agent_routes=True)


@pytest.mark.parametrize(("index", "recorded", "focus"), [
    (1, None, 0), (None, None, 1), (None, None, None), (7, None, 0), (0, MONITORS[1], 0),
    (None, Monitor(idx=1, x=5000, y=0, w=800, h=600), 0),
    (None, Monitor(idx=1, x=5000, y=0, w=800, h=600), None)])
def test_an_agent_that_routes_applies_the_routers_rule_to_its_own_screen(
        index: int | None, recorded: Monitor | None, focus: int | None) -> None:
    """The resolution an agent finds for a dispatch left to it is the router's answer for a
    fresh heartbeat of the same screen: one rule, applied where the screen is read."""
    dispatch = _routed_dispatch(index, recorded)
    heartbeat = AgentScreen("m1", tuple(MONITORS), focus, None, 0.0, 0.0)
    request = ResolveMonitor(machine_id="m1", action_id="s1", action_type="click",
                             monitor_index=index, monitor_geometry=recorded)
    assert routed_here(dispatch, MONITORS, focus) == resolve(request, heartbeat, 0.0,
                                                             10.0).target


def test_an_agent_that_routes_never_puts_a_recorded_position_on_another_screen() -> None:
    gone = Monitor(idx=1, x=5000, y=0, w=800, h=600)
    dispatch = _routed_dispatch(1, gone)
    res = routed_here(dispatch, MONITORS, 0)
    assert res is not None and (res.idx, res.reason) == (0, "recorded_monitor_unavailable")
    area = target_area(res, 1, MONITORS, DESKTOP, gone)
    assert blind_elsewhere(dispatch.action, area) is not None  # monitor_unavailable: no input
    # No monitors listed: a named monitor is refused, never the composite.
    res = routed_here(dispatch, [], None)
    assert target_area(res, 1, [], DESKTOP, gone).error is not None
    # A dispatch the router answered for is obeyed as it came.
    held = MonitorResolution(idx=0, offset_x=0, offset_y=0, w=1920, h=1080, source="action")
    plain = dispatch.model_copy(update={"agent_routes": False, "monitor_resolution": held})
    assert routed_here(plain, MONITORS, 1) == held
