"""Filters for what the macos role changed, so that reset.yml can put it back.

Setup keeps a record on the Mac (macos_state_file): each pmset setting as every power source had
it before setup first changed it, the GPU wired limit before setup first set it, and the firewall
rules setup added. A value already recorded stays: it is the user's own, not an earlier run's.
"""

# pmset's flag for one power source's profile, as `pmset -g custom` names the profile.
PROFILE_FLAGS = {"AC Power": "-c", "Battery Power": "-b", "UPS Power": "-u"}


def macos_record(record, inspection):
    """The record after this run: record (what the file holds, {} at first) plus what the
    inspection's plans are about to change."""
    record = record or {}
    pmset = dict(record.get("pmset") or {})
    for change in inspection["pmset"]["changes"]:
        pmset.setdefault(change["setting"], change["now"])
    wired = record.get("wired_limit_mb")
    if wired is None and inspection["wired"]["change"]:
        wired = inspection["wired"]["now"]
    firewall = list(record.get("firewall") or [])
    firewall += [target for target in inspection["firewall"]["add"] if target not in firewall]
    return {"pmset": pmset, "wired_limit_mb": wired, "firewall": firewall}


def macos_restore(record, inspection):
    """What reset sets back: {pmset: [argv per power source and setting that differs now],
    wired_limit_mb: the recorded limit when the live one differs, else None}."""
    record = record or {}
    profiles = inspection["pmset"]["profiles"]
    argvs = [
        ["/usr/bin/pmset", PROFILE_FLAGS[profile], setting, str(value)]
        for setting, before in (record.get("pmset") or {}).items()
        for profile, value in before.items()
        if profile in PROFILE_FLAGS and profiles.get(profile, {}).get(setting, value) != value
    ]
    wired = record.get("wired_limit_mb")
    if wired == inspection["wired"]["now"]:
        wired = None
    return {"pmset": argvs, "wired_limit_mb": wired}


class FilterModule:
    def filters(self):
        return {
            "macos_record": macos_record,
            "macos_restore": macos_restore,
        }
