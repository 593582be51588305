"""Each role's defaults/main.yml and the `main` entry point of its meta/argument_specs.yml agree.

Every default is a documented option, and every documented default is the real one (the role's
defaults file is what Ansible uses; the spec's `default:` is only what `ansible-doc` shows).
Roles without meta/argument_specs.yml are skipped.
"""

import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def roles_with_specs() -> list[Path]:
    return sorted(spec.parents[1] for spec in ROOT.glob("roles/*/meta/argument_specs.yml"))


def same(a, b) -> bool:
    """Equal as YAML values, types included (22 is not "22", true is not 1)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def mismatches(role: Path) -> list[str]:
    spec = yaml.safe_load((role / "meta/argument_specs.yml").read_text()) or {}
    options = ((spec.get("argument_specs") or {}).get("main") or {}).get("options") or {}
    defaults_file = role / "defaults/main.yml"
    defaults = (yaml.safe_load(defaults_file.read_text()) if defaults_file.exists() else None) or {}
    found = []
    for name in defaults:
        if name not in options:
            found.append(f"{role.name}: {name} is in defaults/main.yml but not an option of main")
    for name, option in options.items():
        if "default" not in (option or {}):
            continue
        if name not in defaults:
            found.append(f"{role.name}: {name} has a spec default but is not in defaults/main.yml")
        elif not same(option["default"], defaults[name]):
            found.append(
                f"{role.name}: {name} defaults to {defaults[name]!r} in defaults/main.yml "
                f"but the spec says {option['default']!r}"
            )
    return found


def test_some_roles_have_argument_specs():
    assert len(roles_with_specs()) >= 2


def test_defaults_and_main_argument_spec_agree():
    found = [line for role in roles_with_specs() for line in mismatches(role)]
    assert not found, "defaults/main.yml and meta/argument_specs.yml disagree:\n" + "\n".join(found)
