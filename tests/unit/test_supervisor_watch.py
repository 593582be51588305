"""roles/launch/files/supervisor.py's watchdog judgement: each rank's heartbeat as seen on the
supervisor's clock (time rewritten: the process runs; phase, step, progress moved: the job
advances), judged per phase with the stall and startup timeouts."""

import json

from tests.unit.plugins import load

supervisor = load("roles/launch/files/supervisor.py")
STALL, STARTUP = 10, 100


def beat(phase, step=0, progress=0, time=0.0):
    return {"phase": phase, "step": step, "steps": 50, "progress": progress, "time": time,
            "pid": 7}


def watches(*seen):
    """{rank: Watch} from each rank's [(supervisor time, heartbeat), ...]."""
    made = {}
    for rank, beats in enumerate(seen):
        made[rank] = supervisor.Watch(0)
        for now, b in beats:
            made[rank].see(b, now)
    return made


def judge(seen, now):
    return supervisor.judge_watches(seen, now, STALL, STARTUP)


def refreshed(phase, until, step=0, progress=0):
    """A live rank's heartbeats, rewritten every second up to until, its work not moving."""
    return [(t, beat(phase, step, progress, time=1000.0 + t)) for t in range(until + 1)]


def test_a_long_evaluation_advancing_batch_by_batch_is_no_stall():
    evaluating = [(t, beat("evaluating", 40, progress=t // 8, time=1000.0 + t))
                  for t in range(300)]
    assert judge(watches(evaluating, evaluating), 300) is None


def test_ranks_waiting_for_one_that_advances_are_no_stall():
    # ranks 0 and 2 wait at the evaluation's all_sum; rank 1, slower, is still evaluating
    slow = [(t, beat("evaluating", 40, progress=t // 5, time=1000.0 + t)) for t in range(61)]
    waiting = refreshed("evaluating", 60, step=40, progress=3)
    assert judge(watches(waiting, slow, waiting), 60) is None
    # rank 0 writes a checkpoint for longer than the stall timeout; the others wait in training
    assert judge(watches(refreshed("checkpointing", 60, step=40),
                         refreshed("training", 60, step=40)), 60) is None


def test_no_progress_anywhere_is_a_stall_after_the_phases_limit():
    stuck = refreshed("evaluating", 30, step=40, progress=3)
    assert judge(watches(stuck, stuck), STALL - 1) is None
    why = judge(watches(stuck, stuck), 30)
    assert why.startswith("no progress on any rank: rank 0 evaluating for 30 s (timeout 10 s)")
    training = refreshed("training", 30, step=41)
    assert "rank 1 training for 30 s" in judge(watches(stuck, training), 30)


def test_a_load_a_checkpoint_or_a_ranks_last_writes_have_the_startup_timeout():
    loading = refreshed("loading", 99)
    assert judge(watches(loading, loading), 99) is None
    assert "rank 0 loading for 101 s (timeout 100 s)" in judge(watches(loading, loading), 101)
    writing = refreshed("checkpointing", 99, step=40)
    assert judge(watches(writing, refreshed("training", 99, step=40)), 99) is None
    # every rank past its last step, writing its results (its heartbeat no longer rewritten):
    # a slow disk or a busy host, no stall until the startup timeout (the LoRA job of
    # test_long_runs on capped hosts was restarted after 10 s before)
    ended = [(t, beat("exiting", 50, time=1000.0)) for t in range(100)]
    assert judge(watches(ended, ended), 99) is None
    assert "rank 0 exiting for 101 s (timeout 100 s)" in judge(watches(ended, ended), 101)
    # before any heartbeat (Python and MPI starting): the startup timeout too
    assert judge(watches([], []), 99) is None
    assert "rank 0 not started for 101 s" in judge(watches([], []), 101)


def test_a_rank_whose_heartbeat_stops_is_frozen_in_any_phase():
    for phase in ("loading", "training", "evaluating", "checkpointing"):
        frozen = [(t, beat(phase, time=1000.0)) for t in range(13)]  # read, never rewritten
        loading = refreshed("loading", 12)
        assert judge(watches(loading, frozen[:STALL]), STALL - 1) is None
        assert judge(watches(loading, frozen), 12) == (
            f"rank 1's heartbeat not rewritten for 12 s ({phase}, timeout 10 s)")


def test_a_rank_that_cannot_be_read_or_has_ended_is_not_frozen():
    # read at 0 s, then its host stopped answering: unknown, not frozen (the others decide)
    unread = [(0, beat("training", time=1000.0))]
    assert judge(watches(refreshed("loading", 60), unread), 60) is None
    # a rank that finished: its last heartbeat says exiting and is never rewritten again
    ended = [(t, beat("exiting", 50, time=1000.0)) for t in range(30)]
    assert judge(watches(refreshed("exiting", 5, step=50), ended), 5) is None


def test_a_rank_last_read_loading_has_the_stall_timeout_once_another_trained_a_step():
    """A host powered off soon after the start: its rank was last read loading (or never), the
    others trained steps 101 to 105 of a launch resumed at 100 and then wait for it."""
    def training(t, step):
        return t, {**beat("training", step, time=1000.0 + t), "start": 100}

    trained = [training(t, min(100 + t, 105)) for t in range(21)]
    for unread in ([(0, beat("loading", time=1000.0))], []):
        why = judge(watches(trained, unread), 20)
        assert why and why.endswith(f"rank 1 {'loading' if unread else 'not started'} for 20 s "
                                    "(timeout 10 s)"), why
    # before a step of this launch, a rank still loading has the startup timeout
    waiting = [training(t, 100) for t in range(21)]
    assert judge(watches(waiting, refreshed("loading", 20)), 20) is None


def test_status_shows_the_phase_or_each_ranks_phase():
    assert supervisor.phases_text({}) == ""
    assert supervisor.phases_text({"0": "evaluating", "1": "evaluating"}) == " (evaluating)"
    assert supervisor.phases_text({"0": "training", "1": "loading"}) == (
        " (rank 0 training, rank 1 loading)")


def test_a_supervisor_held_up_after_reading_judges_what_it_read_not_the_time_it_lost(tmp_path):
    """A loaded host or a slow disk can hold the supervisor up between reading the heartbeats
    and judging them (seen in CI: a false stall naming a phase the ranks had left seconds
    before). Real files, real clock: read, held up past the stall timeout, then judged."""
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    args = supervisor.parser().parse_args(
        ["start", "--run-dir", str(run), "--lock", str(tmp_path / "lock"),
         "--rank-hosts", '[{"rank": 0, "host": "h0", "address": "local"}]'])
    args.stall_timeout = 1  # below what the CLI takes (10 s): this test waits it out
    sup = supervisor.Supervisor(args, run)
    sup.watch_launch(supervisor.time.time())
    (run / "logs" / "rank.0.heartbeat").write_text(
        json.dumps({**beat("training", 3), "time": supervisor.time.time()}))
    sup.watch_progress()
    supervisor.time.sleep(1.5)  # held up
    assert sup.check() is None
    sup.watch_progress()  # read again: the same heartbeat, not rewritten for the timeout
    assert "not rewritten for" in supervisor.judge_watches(sup.watches, sup.read_at, 1, 100)


def test_a_heartbeat_is_this_launchs_by_its_own_hosts_clock(tmp_path):
    """A previous launch's heartbeat left on a host is not this launch's, however far that
    host's clock is ahead or behind: read_host reads the host's clock with the files."""
    (tmp_path / "hb").write_text(json.dumps(beat("training", 3, time=1000.0)))
    beats, states, ahead, figures = supervisor.read_host("local",
                                                         [tmp_path / "hb", tmp_path / "none"])
    assert beats == [beat("training", 3, time=1000.0), None] and abs(ahead) < 2 and states
    assert figures == {}  # the watchdog's reading: heartbeats only
    sup = supervisor.Supervisor.__new__(supervisor.Supervisor)
    sup.launched_wall = 1100.0
    assert not sup.this_launch(beats[0], 0) and not sup.this_launch(beats[0], -90)
    assert sup.this_launch(beats[0], -120)  # the host's clock 2 minutes behind
    assert not sup.this_launch(None, 0)


def test_status_of_a_run_reads_each_ranks_heartbeat_on_its_host(tmp_path):
    """status --run: each rank of the plan with its heartbeat's phase, step and age; a rank
    without one, and a host ssh cannot reach (a name that does not resolve), said as such."""
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    plan = [{"rank": r, "host": h, "address": a, "run_dir": str(run)}
            for r, h, a in [(0, "h0", "local"), (1, "h0", "local"), (2, "h1", "h1.invalid")]]
    written = beat("training", step=12, time=supervisor.time.time() - 3)
    (run / "logs" / "rank.0.heartbeat").write_text(json.dumps(written))
    ranks, hosts = supervisor.rank_beats(plan)
    assert 3 <= ranks[0].pop("age") < 5
    assert ranks == [
        {"rank": 0, "host": "h0", "reached": True, "phase": "training", "step": 12},
        {"rank": 1, "host": "h0", "reached": True, "phase": None, "step": None, "age": None},
        {"rank": 2, "host": "h1", "reached": False, "phase": None, "step": None, "age": None}]
    # Each host's figures, raw, once per host: this one's memory and interfaces (Linux's).
    assert [(h["host"], h["reached"]) for h in hosts] == [("h0", True), ("h1", False)]
    assert "MemAvailable:" in hosts[0]["figures"]["meminfo"]
    assert "lo " in hosts[0]["figures"]["net"] and hosts[1]["figures"] == {}
