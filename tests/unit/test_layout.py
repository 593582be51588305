"""roles/cluster/filter_plugins/layout.py: one command line for hosts whose homes differ."""

import pytest

from tests.unit.plugins import load

layout = load("roles/cluster/filter_plugins/layout.py")


def info(name, home, work_dir=None):
    work_dir = work_dir or f"{home}/mlx-cluster"
    return {"name": name, "home": home, "work_dir": work_dir, "python_env": f"{work_dir}/venv"}


def test_same_paths_everywhere_are_used_as_they_are():
    plan = layout.cluster_layout([info("a", "/Users/u"), info("b", "/Users/u")])
    assert plan == {"work_dir": "/Users/u/mlx-cluster", "python": "venv/bin/python", "error": None}


def test_different_homes_use_home_relative_paths():
    plan = layout.cluster_layout([info("a", "/home/alice"), info("b", "/Users/bob")])
    assert plan["work_dir"] == '"$HOME"/mlx-cluster' and plan["error"] is None


def test_rank_python_runs_python_from_each_hosts_work_dir():
    plan = {"work_dir": '"$HOME"/mlx-cluster', "python": "venv/bin/python", "error": None}
    argv = layout.cluster_rank_python(plan)
    assert argv == ["/bin/sh", "-c", 'cd "$HOME"/mlx-cluster && exec venv/bin/python "$@"',
                    "python"]
    with pytest.raises(ValueError, match="differs"):
        layout.cluster_rank_python({"error": "cluster_work_dir differs"})


