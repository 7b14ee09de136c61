"""Print, as JSON, the boxes a running GTK program reports for its visible named controls.

    /usr/bin/python3 bench/atspi_boxes.py ROLE [ROLE...]

Run by bench/grounding_record.py inside the program's D-Bus session, with the system
Python (Debian python3-gi, gir1.2-atspi-2.0): the accessibility tree (AT-SPI) gives each
control's name and its extents in screen pixels, as the toolkit laid them out. Only
controls that are showing, of the given roles ("menu", "push button", "label"...).
"""

import json
import sys

import gi

gi.require_version("Atspi", "2.0")
from gi.repository import Atspi  # noqa: E402


def walk(node, roles, out):
    try:
        role, name = node.get_role_name(), node.get_name()
        states = node.get_state_set()
        ext = node.get_extents(Atspi.CoordType.SCREEN)
    except gi.repository.GLib.Error:
        return
    showing = states.contains(Atspi.StateType.SHOWING) and \
        states.contains(Atspi.StateType.VISIBLE)
    if role in roles and name and showing and ext.width > 0 and ext.height > 0:
        out.append({"text": name, "role": role, "box": [ext.x, ext.y, ext.width, ext.height]})
    for i in range(node.get_child_count()):
        walk(node.get_child_at_index(i), roles, out)


def main():
    desktop = Atspi.get_desktop(0)
    out = []
    for i in range(desktop.get_child_count()):
        walk(desktop.get_child_at_index(i), set(sys.argv[1:]), out)
    print(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    main()
