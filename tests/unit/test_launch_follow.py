"""roles/launch/action_plugins/launch_follow.py: the followed job as the supervisor judges it."""

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
