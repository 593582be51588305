"""roles/launch/action_plugins/launch_follow.py: the followed job as the supervisor judges it."""

import json
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail

from tests.unit.plugins import load

follow = load("roles/launch/action_plugins/launch_follow.py")
RUNNING = {"run": "r", "state": "running", "last_step": 7}


def test_a_job_the_supervisor_calls_lost_ends_the_follow_with_its_reason():
    lost = {**RUNNING, "state": "lost", "reason": "its supervisor is gone",
            "launcher_running": True}
    assert follow._judged(RUNNING, [lost], "r", "a") == lost
    assert follow._judged(RUNNING, [RUNNING], "r", "a") == RUNNING
    assert follow._judged(RUNNING, None, "r", "a") == RUNNING  # not asked: it had news


def test_an_unknown_run_is_refused_naming_the_runs_there():
    with pytest.raises(AnsibleActionFail, match=r"there is no run nope on a — its runs: r, s "):
        follow._judged({}, [RUNNING, {**RUNNING, "run": "s"}], "nope", "a")
    with pytest.raises(AnsibleActionFail, match="its runs: none"):
        follow._judged({}, [], "nope", "a")


def test_the_page_is_written_from_status_and_a_failure_never_ends_the_follow(tmp_path):
    answers = iter([{"rc": 0, "stdout": "[]"}, {"rc": 0, "stdout": "not json"},
                    {"rc": 0, "stdout": json.dumps([{"run": "r", "state": "finished"}])}])
    asked = []

    def execute(command, sudoable):
        asked.append(command)
        return next(answers)

    fake = SimpleNamespace(_low_level_execute_command=execute)
    for _ in range(3):
        follow.ActionModule._page(fake, tmp_path / "r", ["py", "sup.py", "status", "--json",
                                                         "--run", "r"], "h0")
    assert asked == ["py sup.py status --json --run r"] * 3
    view = json.loads((tmp_path / "r" / "status.json").read_text())
    assert view["state"] == "finished" and not view["live"]
