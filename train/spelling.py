"""Which option a mistyped name meant: the keys of a `python -m train --config` file and the extra
vars of train.yml (roles/launch/filter_plugins/launch.py loads this file by its path)."""

import re

# Names people reach for that mean one of ours: mlx-lm's (the keys of its lora config file: iters,
# learning_rate, steps_per_report, steps_per_eval, val_batches, save_every), and epochs (we count
# steps).
ALIASES = {"learningrate": "lr", "iters": "steps", "iterations": "steps", "epochs": "steps",
           "epoch": "steps", "stepsperreport": "log_every", "stepspereval": "eval_every",
           "valbatches": "eval_batches", "saveevery": "checkpoint_every"}


def key(name):
    return re.sub(r"[^a-z0-9]", "", name.lower())


def distance(a, b):
    """Edits (insert, delete, change, swap two neighbours) from a to b: Damerau-Levenshtein's
    optimal string alignment."""
    rows = [list(range(len(b) + 1))]
    for i, x in enumerate(a, 1):
        row = [i]
        for j, y in enumerate(b, 1):
            row.append(min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + (x != y)))
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


def meant(name, options):
    """The options a name most likely meant, or []: the same letters in another spelling, a known
    alias, one word of an option (limit: time_limit), or a near miss (one edit for names up to 5
    letters, two for longer ones; the nearest, and of those the ones the name begins)."""
    wanted = key(name)
    keys = {key(option): option for option in options}
    if wanted in keys or ALIASES.get(wanted) in options:
        return [keys.get(wanted) or ALIASES[wanted]]
    if "_" not in name and len(wanted) >= 4:
        words = [option for option in options if wanted in option.split("_")]
        if words:
            return words
    if len(wanted) >= 3:
        near = [(distance(wanted, k), option) for k, option in keys.items()]
        best = min(near)[0]
        if best <= (1 if len(wanted) <= 5 else 2):
            ties = [option for d, option in near if d == best]
            # step: steps (one letter short) before stop (one letter changed)
            return [o for o in ties if key(o).startswith(wanted)] or ties
    return []


def either(options):
    """a, b or c"""
    return " or ".join([", ".join(options[:-1]), options[-1]] if len(options) > 1 else options)
