"""Filters for the macos role's firewall part: what the Application Firewall's `socketfilterfw`
prints, and which of the cluster's executables it must be told to let in.

A rank's Python and Open MPI's daemons accept connections from the other hosts; with the firewall
on, an executable it has no rule for is blocked (macOS asks on the screen nobody watches), and
`mpirun` hangs without an error. `--getappblocked` is no test: it reports "permitted" for paths
the firewall has never heard of, so the app list (`--listapps`) decides.
"""

import posixpath
import re

_STATE = re.compile(r"\(State = (\d+)\)")
# --listapps: "1 : /usr/libexec/remoted" (macOS 13 and later) or "1 :  /path " (earlier) ...
_ENTRY = re.compile(r"\s*\d+\s*:\s*(?P<app>.*?)\s*")
# ... followed by "(Allow incoming connections)" or " \t ( Block incoming connections ) ".
_MODE = re.compile(r"\s*\(\s*(?P<mode>Allow|Block) incoming connections\s*\)\s*")
# Some versions list names with a number instead: "Google Chrome (state: 4)"; 1 allows, 4 blocks.
_NAMED = re.compile(r"\s*(?P<app>\S.*?)\s+\(state:\s*(?P<state>\d+)\)\s*")
# An executable inside an app bundle: the firewall keeps its rule for the bundle.
_BUNDLED = re.compile(r"(?P<bundle>/.+?\.app)/Contents/MacOS/[^/]+")


def socketfilterfw_state(text):
    """{enabled, block_all} from `socketfilterfw --getglobalstate --getblockall`; None where the
    output does not say. State 0 is off; 1 and 2 are on (2 is stealth mode on some versions and
    "block all" on others, so block_all comes from the words)."""
    enabled = block_all = None
    for line in str(text or "").splitlines():
        state = _STATE.search(line)
        if state:
            enabled = int(state[1]) > 0
        words = line.lower()
        if "blocking all" in words or "set to block all" in words:
            block_all = True
        elif "block all state set to" in words:
            block_all = bool(block_all) or "enabled" in words
    return {"enabled": enabled, "block_all": block_all}


def socketfilterfw_apps(text):
    """[{app, allowed}] from `socketfilterfw --listapps` (app: a path, or a name on versions that
    list names); None when the output is no app list (an error message, or nothing)."""
    lines = str(text or "").splitlines()
    if not any("total number of apps" in line.lower() for line in lines):
        return None
    apps, pending = [], None
    for line in lines:
        entry, mode, named = (_ENTRY.fullmatch(line), _MODE.fullmatch(line),
                              _NAMED.fullmatch(line))
        if entry:
            pending = entry["app"]
        elif mode and pending is not None:
            apps.append({"app": pending, "allowed": mode["mode"] == "Allow"})
            pending = None
        elif named:
            apps.append({"app": named["app"], "allowed": named["state"] == "1"})
    return apps


def socketfilterfw_target(path):
    """What to hand `socketfilterfw --add`: the app bundle of an executable inside one
    (.../Python.app/Contents/MacOS/Python -> .../Python.app), else the executable itself."""
    bundled = _BUNDLED.fullmatch(str(path))
    return bundled["bundle"] if bundled else str(path)


def _covers(app, path, identifier=None):
    """Whether a --listapps entry (a path, a name, or a bundle identifier) is the rule for the
    executable (or bundle) at path."""
    target = socketfilterfw_target(path)
    if app.startswith("/"):
        return app in (target, path)
    names = {posixpath.basename(target), posixpath.basename(path)}
    return app == identifier or app in names | {name.removesuffix(".app") for name in names}


def socketfilterfw_listed(paths, apps):
    """The paths (executables or bundles) the app list has a rule for, allowing or blocking."""
    return [path for path in paths or [] if any(_covers(a["app"], path) for a in apps or [])]


def socketfilterfw_plan(state_result, apps_result, executables):
    """What setup must tell the firewall, and what check.yml reports.

    state_result, apps_result: registered `--getglobalstate --getblockall` and `--listapps`;
    executables: what files/executables.py printed ({python, openmpi: [...], identifiers}), None
    if it failed.
    Returns {enabled, block_all, apps: [{path, target, listed, allowed}], add, unblock, listing,
    errors}: add lists the targets without a rule, unblock those not allowed (both empty while
    the firewall is off); errors: what keeps setup from deciding (enabled and block_all are
    false where the output did not say).
    """
    state = socketfilterfw_state((state_result or {}).get("stdout"))
    listing = socketfilterfw_apps((apps_result or {}).get("stdout"))
    paths, identifiers = [], {}
    if executables:
        paths = [executables["python"]] + list(executables.get("openmpi") or [])
        identifiers = executables.get("identifiers") or {}
    apps = []
    for path in paths:
        rules = [a for a in listing or [] if _covers(a["app"], path, identifiers.get(path))]
        apps.append({"path": path, "target": socketfilterfw_target(path), "listed": bool(rules),
                     "allowed": bool(rules) and all(a["allowed"] for a in rules)})
    errors = []
    if state["enabled"] is None:
        errors.append("cannot tell whether the Application Firewall is on (`socketfilterfw "
                      f"--getglobalstate` printed {_said(state_result)})")
    if state["enabled"] and listing is None:
        errors.append("the Application Firewall is on but its app list cannot be read "
                      f"(`socketfilterfw --listapps` printed {_said(apps_result)})")
    if state["enabled"] and not executables:
        errors.append("cannot find the environment's Python executable (run the python_env "
                      "role first)")
    on = bool(state["enabled"]) and listing is not None
    return {
        "enabled": bool(state["enabled"]), "block_all": bool(state["block_all"]), "apps": apps,
        "add": _unique(a["target"] for a in apps if on and not a["listed"]),
        "unblock": _unique(a["target"] for a in apps if on and not a["allowed"]),
        "listing": listing or [], "errors": errors,
    }


def _said(result):
    result = result or {}
    text = str(result.get("stdout") or result.get("stderr") or result.get("msg") or "").strip()
    return repr(text.splitlines()[0]) if text else "nothing"


def _unique(items):
    return list(dict.fromkeys(items))


class FilterModule:
    def filters(self):
        return {
            "socketfilterfw_apps": socketfilterfw_apps,
            "socketfilterfw_listed": socketfilterfw_listed,
            "socketfilterfw_plan": socketfilterfw_plan,
            "socketfilterfw_state": socketfilterfw_state,
            "socketfilterfw_target": socketfilterfw_target,
        }
