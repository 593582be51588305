"""docs/training.md's table of train.yml's options, generated from the one table that defines them.

The `request` entry of roles/launch/meta/argument_specs.yml is that table; this writes it as
markdown between the two marker lines of docs/training.md, and tests/unit/test_docs.py fails when
the page differs from what it writes:

    .venv/bin/python -m tools.option_table
"""

import html
import json
from pathlib import Path

import yaml

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "roles/launch/meta/argument_specs.yml"
PAGE = ROOT / "docs/training.md"
BEGIN = "<!-- option table: written by python -m tools.option_table, do not edit -->"
END = "<!-- end of option table -->"


def request_options():
    return yaml.safe_load(SPEC.read_text())["argument_specs"]["request"]["options"]


def cell(text):
    """Text that stays in its table cell and shows as written (`<run>` is no HTML tag)."""
    return html.escape(text, quote=False).replace("|", "\\|")


def default(name, spec):
    """An option's default as the tables show it: `false`, `[]`, `auto`; empty if it has none.
    The supervisor's options have theirs in the supervisor (its `check` settles them)."""
    value = spec.get("default", load("roles/launch/files/supervisor.py").settle([]).get(name))
    if value is None:
        return ""
    return f"`{value if isinstance(value, str) else json.dumps(value)}`"


def table(options):
    rows = ["| option | type | default | choices | description |", "|---|---|---|---|---|"]
    for name, spec in options.items():
        choices = ", ".join(f"`{choice}`" for choice in spec.get("choices", []))
        description = spec["description"]
        if isinstance(description, list):  # argument specs allow a list of paragraphs
            description = " ".join(description)
        rows.append(f"| `{name}` | {spec['type']} | {default(name, spec)} | {choices} | "
                    f"{cell(description)} |")
    return "\n".join(rows) + "\n"


def page(text, options):
    """text with the part between the markers replaced by the table of options."""
    head, begin, rest = text.partition(BEGIN + "\n")
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"{PAGE.relative_to(ROOT)}: the lines {BEGIN!r} and {END!r} are missing")
    return head + begin + table(options) + end + tail


if __name__ == "__main__":
    PAGE.write_text(page(PAGE.read_text(), request_options()))
