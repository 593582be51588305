"""roles/launch/files/supervisor.py's elastic plan: the hosts that are left, renumbered."""

from tests.unit.plugins import load

supervisor = load("roles/launch/files/supervisor.py")


def rank(r, host, address, mpi_address):
    return {"rank": r, "host": host, "address": address, "mpi_address": mpi_address,
            "run_dir": f"/home/{host}/mlx-cluster/runs/x"}


PLAN = [rank(0, "a", "local", "198.19.0.1"), rank(1, "b", "198.19.0.2", "198.19.0.2"),
        rank(2, "b", "198.19.0.2", "198.19.0.2"), rank(3, "c", "198.19.0.3", "198.19.0.3")]


def test_a_lost_host_is_left_out_and_the_ranks_renumbered_in_hostfile_order():
    plan = supervisor.without_hosts(PLAN, ["b"])
    assert [(h["rank"], h["host"]) for h in plan] == [(0, "a"), (1, "c")]
    assert plan[1]["run_dir"] == "/home/c/mlx-cluster/runs/x"
    assert supervisor.hostfile_lines(plan) == "198.19.0.1 slots=1\n198.19.0.3 slots=1\n"
    assert supervisor.hostfile_lines(PLAN) == (
        "198.19.0.1 slots=1\n198.19.0.2 slots=2\n198.19.0.3 slots=1\n")


def test_the_launcher_argv_gets_the_new_hostfile_and_rank_count():
    argv = ["/usr/bin/mpirun", "--hostfile", "/w/hostfile", "-np", "4", "--bind-to", "none",
            "/bin/sh", "-c", "... -np 4 ...", "train", "--steps", "9"]
    new = supervisor.with_option(supervisor.with_option(argv, "--hostfile", "/r/h"), "-np", 2)
    assert new == ["/usr/bin/mpirun", "--hostfile", "/r/h", "-np", "2", "--bind-to", "none",
                   "/bin/sh", "-c", "... -np 4 ...", "train", "--steps", "9"]
