"""Filters for the macos role's sleep settings: what `pmset -g` and `pmset -g custom` print, and
which requested settings a `pmset -a` must change.

Both print sections ("System-wide power settings:", "Currently in use:" for -g; one per power
source, "AC Power:", "Battery Power:", "UPS Power:", for -g custom), then one line per setting:
the name padded to 20 columns and its value, sometimes with a note ("sleep 1 (sleep prevented by
sharingd, coreaudiod)"). A name may contain spaces ("Sleep On Power Button 1").
"""

import re

# Name (words joined by single spaces), value, optional note in parentheses.
_SETTING = re.compile(r"(?P<name>\S+(?: \S+)*?)\s+(?P<value>\S+)(?:\s+\(.*\))?")


def _value(text):
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def pmset_sections(text):
    """{section: {setting: value}}: whole numbers as int, anything else (hibernatefile) as str."""
    sections = {}
    current = None
    for line in str(text or "").splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not line[0].isspace() and stripped.endswith(":"):
            current = sections.setdefault(stripped[:-1], {})
            continue
        match = _SETTING.fullmatch(stripped)
        if current is not None and match:
            current[match["name"]] = _value(match["value"])
    return sections


def pmset_plan(result, requested):
    """What `pmset -a` must change so that every power source has the requested settings.

    result: the registered `pmset -g custom`; requested: {setting: whole number} (macos_pmset).
    A setting changes when some power source shows another value. One that no power source shows
    is an error: pmset would accept it, change nothing, and every run would try again.
    Returns {profiles, requested, changes: [{setting, value, now: {profile: value}}], errors}.
    """
    requested = {str(k): int(v) for k, v in (requested or {}).items()}
    if (result or {}).get("rc", 1) != 0:
        why = str(result.get("stderr") or result.get("msg") or "").strip() or "no output"
        return {"profiles": {}, "requested": requested, "changes": [],
                "errors": [f"`pmset -g custom` failed ({why})"] if requested else []}
    profiles = pmset_sections(result.get("stdout"))
    known = sorted({name for settings in profiles.values() for name in settings})
    changes, errors = [], []
    for setting, value in requested.items():
        now = {profile: settings[setting] for profile, settings in profiles.items()
               if setting in settings}
        if not now:
            errors.append(
                f"macos_pmset: {setting} is not a setting of this Mac's power sources (`pmset -g "
                f"custom` shows {', '.join(known)}) — correct its name or remove it")
        elif any(current != value for current in now.values()):
            changes.append({"setting": setting, "value": value, "now": now})
    return {"profiles": profiles, "requested": requested, "changes": changes, "errors": errors}


def pmset_argv(changes):
    """One `pmset -a` for every change: ['pmset', '-a', 'sleep', '0', 'disksleep', '0']."""
    return ["/usr/bin/pmset", "-a"] + [
        word for change in changes for word in (change["setting"], str(change["value"]))]


class FilterModule:
    def filters(self):
        return {
            "pmset_argv": pmset_argv,
            "pmset_plan": pmset_plan,
            "pmset_sections": pmset_sections,
        }
