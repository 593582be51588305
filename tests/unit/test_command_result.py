"""roles/cluster/filter_plugins/command_result.py: hung or not, and the gist of the output."""

import pytest

from tests.unit.plugins import load

read = load("roles/cluster/filter_plugins/command_result.py").command_result

FRAMED = """--------------------------------------------------------------------------
Open RTE was unable to open the hostfile:
    /nope/hostfile
Check to make sure the path and filename are correct.
--------------------------------------------------------------------------
generic trailing line"""


@pytest.mark.parametrize(
    "result",
    [{"timed_out": True}, {"failed": True, "msg": "Timeout exceeded"},
     {"msg": "async task did not complete within the requested time - 30s"}],
)
def test_each_way_a_bound_is_reported_is_a_timeout(result):
    assert read(result)["timed_out"] is True


def test_gist_is_the_start_of_open_mpis_framed_message():
    result = read({"rc": 1, "stderr": FRAMED, "stdout": "x"})
    assert result["gist"] == "Open RTE was unable to open the hostfile: /nope/hostfile"
    assert result["timed_out"] is False and result["rc"] == 1  # the result itself is kept


def test_gist_falls_back_to_stdout_and_last_lines_skip_banners():
    result = read({"rc": 1, "stderr": "", "stdout": "starting\nboom\n-----\n"})
    assert result["gist"] == "boom" and result["stdout_last"] == "boom"
    assert read(None)["gist"] == ""
