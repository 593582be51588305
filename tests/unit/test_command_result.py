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


def test_probe_results_by_name_and_their_json():
    probes = load("roles/cluster/filter_plugins/command_result.py")
    results = [{"item": "versions", "rc": 0, "stdout": '{"python": "3.11.7"}'},
               {"item": "train_tree", "rc": 1, "stdout": ""},
               {"item": {"name": "m2"}, "rc": 0, "stdout": "m2"}]  # an ssh login, by host
    by_name = probes.results_by_item(results)
    assert sorted(by_name) == ["train_tree", "versions"]
    assert probes.json_result(by_name["versions"]) == {"python": "3.11.7"}
    assert probes.json_result(by_name["train_tree"]) is None
