"""The macos role's firewall part, checked against real `socketfilterfw` output.

Samples, layout kept byte for byte where the source kept it:
- --getglobalstate: "Firewall is enabled. (State = 1)", "Firewall is disabled. (State = 0)" and,
  with block all on, "Firewall is enabled. (State = 2)" (rgcr/m-cli#160, #161, macOS 11);
  "Firewall is blocking all non-essential incoming connections. (State = 2)"
  (dan-snelson/Mac-Health-Check#8, macOS 15, 2025).
- KOLIDE_GET: kolide/launcher ee/tables/execparsers/socketfilterfw/test-data/data.txt, several
  --get flags in one run; State = 2 there with block all disabled (stealth mode on,
  kolide/launcher#1842); two of its lines end in a space.
- "Firewall is set to block all non-essential incoming connections": --getblockall with block all
  on (rgcr/m-cli#161; a compliance script in a public repository expects it from --getblockall).
- LIST_MOJAVE: `--listapps` of macOS 10.14 in public notes (2019), "ALF: total number of apps",
  entries " 1 :  /path" and " \t ( Allow incoming connections )" (one of its 7 entries pasted).
- LIST_RECENT: `sudo socketfilterfw --listapps` in nix-darwin/nix-darwin#1705 (2026).
- LIST_NAMED: kolide/launcher ee/tables/execparsers/socketfilterfw/test-data/apps.txt: names and
  bundle identifiers with a number (1 allows, 4 blocks).
- UNBLOCKED / NOT_IN_FIREWALL: `--unblock` with and without the app in the list
  (lima-vm/socket_vmnet#51, 2024): socketfilterfw says so with exit status 0 either way.
"""

from pathlib import Path

import jinja2
import pytest
import yaml

from tests.unit.plugins import load

ROOT = Path(__file__).resolve().parents[2]

fw = load("roles/macos/filter_plugins/socketfilterfw.py")

ON = "Firewall is enabled. (State = 1)\n"
OFF = "Firewall is disabled. (State = 0)\n"
BLOCK_ALL_MACOS11 = "Firewall is enabled. (State = 2)\n"
BLOCKING_MACOS15 = "Firewall is blocking all non-essential incoming connections. (State = 2)\n"
BLOCK_ALL_OFF = "Firewall has block all state set to disabled.\n"
BLOCK_ALL_ON = "Firewall is set to block all non-essential incoming connections\n"
KOLIDE_GET = (
    "Firewall is enabled. (State = 2)\n"
    "Firewall has block all state set to disabled.\n"
    "Automatically allow built-in signed software ENABLED.\n"
    "Automatically allow downloaded signed software ENABLED.\n"
    "Stealth mode enabled\n"
    "Log mode is on \n"
    "Log Option is throttled \n"
)

LIST_MOJAVE = """ALF: total number of apps = 7

1 :  /Library/Java/JavaVirtualMachines/amazon-corretto-8.jdk/Contents/Home/bin/java
 \t ( Allow incoming connections )
"""

LIST_RECENT = """Total number of apps = 9
1 : /usr/libexec/sshd-session
             (Block incoming connections)
2 : /usr/libexec/sshd-auth
             (Block incoming connections)
3 : /usr/libexec/remoted
             (Allow incoming connections)
4 : /usr/bin/python3
             (Allow incoming connections)
5 : /usr/bin/ruby
             (Allow incoming connections)
6 : /usr/sbin/cupsd
             (Allow incoming connections)
7 : /usr/libexec/sharingd
             (Allow incoming connections)
8 : /usr/libexec/sshd-keygen-wrapper
             (Allow incoming connections)
9 : /usr/sbin/smbd
             (Allow incoming connections)
"""

LIST_NAMED = """Total number of apps = 6
replicatord (state: 1)
Pop Helper.app (state: 4)
Google Chrome (state: 4)
rtadvd (state: 1)
com.docker.backend (state: 1)
sshd-keygen-wrapper (state: 1)
"""

UNBLOCKED = "Incoming connection to the application is permitted\n"
NOT_IN_FIREWALL = "The application is not part of the firewall\n"

# A Homebrew Mac: the venv's Python runs as the framework's Python.app; Open MPI 5.
PYTHON_APP = ("/opt/homebrew/Cellar/python@3.12/3.12.8/Frameworks/Python.framework/Versions/3.12"
              "/Resources/Python.app/Contents/MacOS/Python")
PYTHON_BUNDLE = PYTHON_APP.removesuffix("/Contents/MacOS/Python")
OMPI = "/opt/homebrew/Cellar/open-mpi/5.0.6/bin/"
EXECUTABLES = {"python": PYTHON_APP, "openmpi": [OMPI + "mpirun", OMPI + "prterun", OMPI + "prted"],
               "identifiers": {PYTHON_APP: "org.python.python"}}


def ran(stdout, rc=0):
    return {"rc": rc, "stdout": stdout.rstrip("\n"), "stderr": ""}


def listing_with(*entries):
    """A --listapps in LIST_RECENT's layout, its recorded entries followed by ours."""
    lines = LIST_RECENT.splitlines()
    lines[0] = f"Total number of apps = {9 + len(entries)}"
    for n, (path, allowed) in enumerate(entries, start=10):
        mode = "Allow" if allowed else "Block"
        lines += [f"{n} : {path}", f"             ({mode} incoming connections)"]
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("text", "enabled", "block_all"),
    [
        (ON, True, None),
        (OFF, False, None),
        (BLOCK_ALL_MACOS11, True, None),  # State 2 alone does not say which mode
        (BLOCKING_MACOS15, True, True),
        (ON + BLOCK_ALL_OFF, True, False),
        (BLOCK_ALL_MACOS11 + BLOCK_ALL_ON, True, True),
        (KOLIDE_GET, True, False),  # State 2 with block all off: stealth mode
        ("", None, None),
    ],
)
def test_global_state_and_block_all(text, enabled, block_all):
    assert fw.socketfilterfw_state(text) == {"enabled": enabled, "block_all": block_all}


def test_listapps_of_macos_10_14():
    assert fw.socketfilterfw_apps(LIST_MOJAVE) == [{
        "app": "/Library/Java/JavaVirtualMachines/amazon-corretto-8.jdk/Contents/Home/bin/java",
        "allowed": True}]


def test_listapps_of_recent_macos():
    apps = fw.socketfilterfw_apps(LIST_RECENT)
    assert len(apps) == 9
    assert apps[0] == {"app": "/usr/libexec/sshd-session", "allowed": False}
    assert apps[3] == {"app": "/usr/bin/python3", "allowed": True}
    assert [a["app"] for a in apps if not a["allowed"]] == [
        "/usr/libexec/sshd-session", "/usr/libexec/sshd-auth"]


def test_listapps_by_name():
    apps = fw.socketfilterfw_apps(LIST_NAMED)
    assert apps[1] == {"app": "Pop Helper.app", "allowed": False}
    assert apps[4] == {"app": "com.docker.backend", "allowed": True}
    assert [a["app"] for a in apps if a["allowed"]] == [
        "replicatord", "rtadvd", "com.docker.backend", "sshd-keygen-wrapper"]


@pytest.mark.parametrize("text", ["", NOT_IN_FIREWALL, UNBLOCKED])
def test_anything_but_an_app_list_is_none(text):
    assert fw.socketfilterfw_apps(text) is None


def test_an_executable_in_a_bundle_is_added_as_the_bundle():
    assert fw.socketfilterfw_target(PYTHON_APP) == PYTHON_BUNDLE
    assert fw.socketfilterfw_target(OMPI + "prted") == OMPI + "prted"


def test_with_the_firewall_off_nothing_is_added():
    plan = fw.socketfilterfw_plan(ran(OFF), ran(LIST_RECENT), EXECUTABLES)
    assert plan["enabled"] is False and plan["add"] == [] and plan["unblock"] == []
    assert plan["errors"] == []


def test_with_the_firewall_on_every_executable_without_a_rule_is_added_and_allowed():
    plan = fw.socketfilterfw_plan(ran(ON + BLOCK_ALL_OFF), ran(LIST_RECENT), EXECUTABLES)
    targets = [PYTHON_BUNDLE, OMPI + "mpirun", OMPI + "prterun", OMPI + "prted"]
    assert plan["add"] == targets and plan["unblock"] == targets
    assert [a["listed"] for a in plan["apps"]] == [False] * 4
    assert plan["errors"] == [] and plan["block_all"] is False


def test_only_what_is_not_allowed_yet_changes():
    # Python.app allowed (macOS keeps the rule for the bundle), prted blocked, prterun missing.
    listing = listing_with((PYTHON_BUNDLE, True), (OMPI + "prted", False), (OMPI + "mpirun", True))
    plan = fw.socketfilterfw_plan(ran(ON), ran(listing), EXECUTABLES)
    assert plan["add"] == [OMPI + "prterun"]
    assert plan["unblock"] == [OMPI + "prterun", OMPI + "prted"]
    allowed = {a["target"]: a["allowed"] for a in plan["apps"]}
    assert allowed == {PYTHON_BUNDLE: True, OMPI + "mpirun": True, OMPI + "prterun": False,
                       OMPI + "prted": False}


def test_a_rule_for_the_executable_itself_counts_too():
    listing = listing_with((PYTHON_APP, True))
    plan = fw.socketfilterfw_plan(ran(ON), ran(listing), {"python": PYTHON_APP, "openmpi": []})
    assert plan["add"] == [] and plan["unblock"] == []


def test_a_list_of_names_is_matched_by_name_and_bundle_identifier():
    named = LIST_NAMED + "org.python.python (state: 1)\nprted (state: 4)\n"
    plan = fw.socketfilterfw_plan(ran(KOLIDE_GET), ran(named), EXECUTABLES)
    assert plan["add"] == [OMPI + "mpirun", OMPI + "prterun"]
    assert plan["unblock"] == [OMPI + "mpirun", OMPI + "prterun", OMPI + "prted"]


def test_an_unreadable_list_with_the_firewall_on_stops_setup():
    plan = fw.socketfilterfw_plan(ran(ON), ran(NOT_IN_FIREWALL), EXECUTABLES)
    [error] = plan["errors"]
    assert "app list cannot be read" in error and "The application is not part" in error
    assert plan["add"] == [] and plan["unblock"] == []


def test_an_unknown_state_or_a_missing_python_stops_setup():
    assert "cannot tell whether" in fw.socketfilterfw_plan(
        ran(""), ran(LIST_RECENT), EXECUTABLES)["errors"][0]
    [error] = fw.socketfilterfw_plan(ran(ON), ran(LIST_RECENT), None)["errors"]
    assert "environment's Python" in error


def test_listed_finds_the_rules_setup_added_for_reset():
    listing = fw.socketfilterfw_apps(listing_with((PYTHON_BUNDLE, True), (OMPI + "prted", True)))
    recorded = [PYTHON_BUNDLE, OMPI + "prted", OMPI + "prterun"]
    assert fw.socketfilterfw_listed(recorded, listing) == [PYTHON_BUNDLE, OMPI + "prted"]


def test_setup_fails_an_unblock_that_socketfilterfw_refused_with_status_0():
    tasks = yaml.safe_load((ROOT / "roles/macos/tasks/setup-Darwin.yml").read_text())
    [task] = [t for t in tasks if t.get("name") == "Allow them incoming connections"]
    failed = jinja2.Environment().compile_expression(task["failed_when"])
    assert failed(macos_unblock={"rc": 0, "stdout": UNBLOCKED.strip()}) is False
    assert failed(macos_unblock={"rc": 0, "stdout": NOT_IN_FIREWALL.strip()}) is True
