"""The macos role's sleep settings, checked against real `pmset -g` / `pmset -g custom` output.

Samples, layout kept byte for byte:
- PMSET_G_VENTURA: `pmset -g` pasted in 5T33Z0/Gigabyte-Z490-Vision-G-Hackintosh-OpenCore#31
  (macOS Ventura, 2023): a name with spaces, a value with a note, a path value.
- CUSTOM_DESKTOP: `pmset -g custom` in leggod/B460M-MORTAR-Hackintosh#14 (macOS 13.2, a desktop:
  AC Power only; the pasted output starts with a line of spaces).
- CUSTOM_AC_AWAKE: `pmset -g custom` of an Apple-silicon laptop ("power settings before") in a
  public repository's benchmark record, found with the search tool's exact-text look-up
  ("lessbright           1"): sleep and disksleep already 0 on AC Power, not on battery.
"""

from tests.unit.plugins import load

pmset = load("roles/macos/filter_plugins/pmset.py")

PMSET_G_VENTURA = """System-wide power settings:
Currently in use:
 standby              1
 Sleep On Power Button 1
 womp                 1
 hibernatefile        /var/vm/sleepimage
 proximitywake        1
 powernap             1
 networkoversleep     0
 disksleep            10
 standbydelayhigh     86400
 sleep                1 (sleep prevented by sharingd, coreaudiod)
 hibernatemode        3
 ttyskeepawake        1
 displaysleep         20
 tcpkeepalive         1
 highstandbythreshold 50
 standbydelaylow      86400
"""

CUSTOM_DESKTOP = " " * 24 + """
AC Power:
 Sleep On Power Button 1
 standbydelayhigh     86400
 proximitywake        1
 standby              1
 standbydelaylow      86400
 ttyskeepawake        1
 hibernatemode        3
 powernap             0
 gpuswitch            2
 hibernatefile        /var/vm/sleepimage
 highstandbythreshold 50
 displaysleep         10
 womp                 0
 networkoversleep     0
 sleep                1
 tcpkeepalive         0
 autorestart          0
 disksleep            10
"""

CUSTOM_AC_AWAKE = """Battery Power:
 Sleep On Power Button 1
 lowpowermode         1
 standby              1
 ttyskeepawake        1
 hibernatemode        3
 powernap             1
 hibernatefile        /var/vm/sleepimage
 displaysleep         0
 womp                 0
 networkoversleep     0
 sleep                1
 lessbright           1
 tcpkeepalive         1
 disksleep            10
AC Power:
 Sleep On Power Button 1
 lowpowermode         1
 standby              1
 ttyskeepawake        1
 hibernatemode        3
 powernap             1
 hibernatefile        /var/vm/sleepimage
 displaysleep         0
 womp                 0
 networkoversleep     0
 sleep                0
 tcpkeepalive         1
 disksleep            0
"""


def ran(stdout, rc=0, stderr=""):
    """A registered command result as concurrent_commands returns it (trailing newline cut)."""
    return {"rc": rc, "stdout": stdout.rstrip("\n"), "stderr": stderr}


def test_pmset_g_sections_names_with_spaces_notes_and_paths():
    sections = pmset.pmset_sections(PMSET_G_VENTURA)
    assert list(sections) == ["System-wide power settings", "Currently in use"]
    assert sections["System-wide power settings"] == {}
    now = sections["Currently in use"]
    assert len(now) == 16
    assert now["sleep"] == 1  # the note "(sleep prevented by ...)" is not part of the value
    assert now["Sleep On Power Button"] == 1
    assert now["hibernatefile"] == "/var/vm/sleepimage"
    assert now["standbydelayhigh"] == 86400 and now["displaysleep"] == 20


def test_custom_sections_one_per_power_source():
    assert list(pmset.pmset_sections(CUSTOM_DESKTOP)) == ["AC Power"]
    laptop = pmset.pmset_sections(CUSTOM_AC_AWAKE)
    assert list(laptop) == ["Battery Power", "AC Power"]
    assert laptop["Battery Power"]["lessbright"] == 1 and "lessbright" not in laptop["AC Power"]
    assert laptop["AC Power"]["disksleep"] == 0 and laptop["Battery Power"]["disksleep"] == 10


def test_nothing_requested_changes_nothing():
    plan = pmset.pmset_plan(ran(CUSTOM_AC_AWAKE), {})
    assert plan["changes"] == [] and plan["errors"] == []
    assert plan["profiles"]["AC Power"]["sleep"] == 0


def test_a_setting_changes_where_any_power_source_shows_another_value():
    plan = pmset.pmset_plan(ran(CUSTOM_AC_AWAKE), {"sleep": 0, "disksleep": 0, "powernap": 1})
    assert plan["errors"] == []
    # AC already has sleep 0 and disksleep 0, the battery does not; powernap is 1 everywhere.
    assert plan["changes"] == [
        {"setting": "sleep", "value": 0, "now": {"Battery Power": 1, "AC Power": 0}},
        {"setting": "disksleep", "value": 0, "now": {"Battery Power": 10, "AC Power": 0}},
    ]
    assert pmset.pmset_argv(plan["changes"]) == [
        "/usr/bin/pmset", "-a", "sleep", "0", "disksleep", "0"]


def test_settled_settings_change_nothing_on_a_desktop():
    plan = pmset.pmset_plan(ran(CUSTOM_DESKTOP), {"powernap": 0, "womp": 0, "autorestart": 0})
    assert plan["changes"] == [] and plan["errors"] == []


def test_extra_vars_arrive_as_strings():
    plan = pmset.pmset_plan(ran(CUSTOM_DESKTOP), {"sleep": "0"})
    assert plan["changes"] == [{"setting": "sleep", "value": 0, "now": {"AC Power": 1}}]


def test_a_setting_no_power_source_has_is_an_error_naming_the_known_ones():
    # pmset -a would accept lessbright on a desktop and change nothing: every run would retry.
    plan = pmset.pmset_plan(ran(CUSTOM_DESKTOP), {"lessbright": 0, "sleep": 0})
    [error] = plan["errors"]
    assert error.startswith("macos_pmset: lessbright is not a setting of this Mac's power sources")
    assert "autorestart, disksleep" in error and "correct its name or remove it" in error
    assert [c["setting"] for c in plan["changes"]] == ["sleep"]


def test_a_failed_pmset_is_an_error_only_when_something_is_requested():
    failed = ran("", rc=1, stderr="pmset: some error")
    assert pmset.pmset_plan(failed, {})["errors"] == []
    assert pmset.pmset_plan(failed, {"sleep": 0})["errors"] == [
        "`pmset -g custom` failed (pmset: some error)"]
