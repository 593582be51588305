"""Where a rank finds its work directory and Python on hosts whose users and homes differ.

Used by train.yml (roles/launch), check.yml (roles/doctor) and bench.yml (roles/bench) to run one
command line on every host. Pure functions, unit-tested in tests/unit/test_layout.py.
"""

import posixpath
import shlex


def _relative(path, base):
    """path relative to base when inside it, else None."""
    path, base = posixpath.normpath(path), posixpath.normpath(base)
    if path == base:
        return "."
    return posixpath.relpath(path, base) if path.startswith(base.rstrip("/") + "/") else None


def cluster_layout(infos):
    """How a rank finds its work directory and Python, the same words on every host.

    infos: cluster_host_info records {name, home, work_dir, python_env} of the ranked hosts.
    Hosts may have different users and homes (/Users/alice, /home/bob), so a single absolute path
    does not fit all of them. Returns {work_dir: shell word, python: shell word, error: None or
    the reason}.
    """
    work_dirs = {i["work_dir"] for i in infos}
    if len(work_dirs) == 1:
        work_dir = shlex.quote(work_dirs.pop())
    else:
        rels = {_relative(i["work_dir"], i["home"]) for i in infos}
        if len(rels) != 1 or None in rels:
            return {"work_dir": None, "python": None, "error": _paths_error(infos, "work_dir")}
        work_dir = '"$HOME"/' + shlex.quote(rels.pop())
    pythons = {_relative(i["python_env"], i["work_dir"]) for i in infos}
    if len(pythons) == 1 and None not in pythons:
        python = shlex.quote(posixpath.join(pythons.pop(), "bin", "python"))
    elif len({i["python_env"] for i in infos}) == 1:
        python = shlex.quote(posixpath.join(infos[0]["python_env"], "bin", "python"))
    else:
        return {"work_dir": None, "python": None, "error": _paths_error(infos, "python_env")}
    return {"work_dir": work_dir, "python": python, "error": None}


def _paths_error(infos, key):
    paths = ", ".join(f"{i['name']}: {i[key]}" for i in infos)
    what = "cluster_work_dir" if key == "work_dir" else "cluster_python_env"
    return (
        f"{what} differs between hosts in a way one command cannot express ({paths}) — set "
        f"{what} to the same path, or the same path relative to each home, on every host"
    )


def cluster_rank_python(layout):
    """argv prefix that runs the environment's Python on every rank from cluster_layout (a shell
    expands $HOME on each host)."""
    if layout.get("error"):
        raise ValueError(layout["error"])
    return ["/bin/sh", "-c", f'cd {layout["work_dir"]} && exec {layout["python"]} "$@"', "python"]


class FilterModule:
    def filters(self):
        return {"cluster_layout": cluster_layout, "cluster_rank_python": cluster_rank_python}
