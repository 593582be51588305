"""The host's share of requirements.lock: what python_env installs and checks on every host.

requirements.lock (`make lock`: uv pip compile --universal --generate-hashes) pins the
controller's tools and the hosts' packages in one file. A host needs only the packages
`python_env_packages` name and what they pull in: their closure, found through the lock's
`# via` annotations. Each entry keeps the lock's version, environment marker and hashes, so
every host, set up on any day, installs exactly the locked versions.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError
from packaging.requirements import InvalidRequirement, Requirement

# `name==version`, optionally ` ; marker`, then ` \` when hashes follow.
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)"
                  r"(?:\s*;\s*(?P<marker>[^\\]+?))?\s*\\?$")
_HASH = re.compile(r"^\s+--hash=(?P<hash>\S+?)\s*\\?$")
_VIA = re.compile(r"^\s+#\s+(?:via\s+)?(?P<via>\S.*?)\s*$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> list[dict]:
    """Entries of a uv lock: name, version, marker, hashes, via (normalized names)."""
    entries = []
    for line in text.splitlines():
        pin = _PIN.match(line)
        if pin:
            entries.append({"name": pin["name"], "version": pin["version"],
                            "marker": pin["marker"], "hashes": [], "via": []})
        elif entries and (hashed := _HASH.match(line)):
            entries[-1]["hashes"].append(hashed["hash"])
        elif entries and (via := _VIA.match(line)) and via["via"] != "via":
            entries[-1]["via"].append(normalize(via["via"].split()[0]))
    if not entries:
        raise AnsibleFilterError("python_env: the lock pins no package (run `make lock`)")
    return entries


def python_env_locked(lock_text: str, packages: list[str]) -> list[dict]:
    """The locked closure of `packages`: one dict per lock entry a host may need.

    `requirement` is `name[extras]==version ; marker` (what missing_requirements.py checks),
    `line` the same with the lock's hashes (a requirements file for pip's hash-checking mode).
    """
    entries = parse_lock(lock_text)
    locked = {normalize(entry["name"]) for entry in entries}
    roots = {}
    for package in packages:
        try:
            wanted = Requirement(package)
        except InvalidRequirement as error:
            message = f"python_env: {package!r} in python_env_packages: {error}"
            raise AnsibleFilterError(message) from None
        name = normalize(wanted.name)
        if name not in locked:
            raise AnsibleFilterError(
                f"python_env: {wanted.name} (python_env_packages) is not in requirements.lock: "
                "add it to requirements.txt and run `make lock`, so every host gets one version")
        roots[name] = wanted
    closure = set(roots)
    grown = True
    while grown:
        grown = False
        for entry in entries:
            name = normalize(entry["name"])
            if name not in closure and closure.intersection(entry["via"]):
                closure.add(name)
                grown = True
    found = []
    for entry in entries:
        name = normalize(entry["name"])
        if name not in closure:
            continue
        wanted = roots.get(name)
        if wanted and wanted.specifier and not wanted.specifier.contains(entry["version"], True):
            raise AnsibleFilterError(
                f"python_env: python_env_packages asks for {wanted}, requirements.lock pins "
                f"{entry['name']}=={entry['version']}: change one of them")
        extras = f"[{','.join(sorted(wanted.extras))}]" if wanted and wanted.extras else ""
        requirement = f"{entry['name']}{extras}=={entry['version']}"
        if entry["marker"]:
            requirement += f" ; {entry['marker']}"
        hashes = "".join(f" --hash={digest}" for digest in entry["hashes"])
        found.append({"name": entry["name"], "version": entry["version"],
                      "requirement": requirement, "line": requirement + hashes})
    return found


class FilterModule:
    def filters(self):
        return {"python_env_locked": python_env_locked}
