"""The concurrent_commands module (roles/cluster/library), run as Ansible runs it: as a module,
and as its action plugin runs it on a host whose Python it knows (the module's source sent to
that Python, without Ansible there)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load

ROLE = Path(__file__).parents[2] / "roles/cluster"
MODULE = ROLE / "library/concurrent_commands.py"


def run_module(tmp_path, **args):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    done = subprocess.run(
        [sys.executable, str(MODULE), str(args_file)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def run_direct(tmp_path, commands, timeout=30, max_workers=16):
    """What the action plugin runs on the host: its bootstrap, with the module's source and the
    arguments on stdin, in a Python that cannot import Ansible (-I, an empty directory)."""
    action = load(ROLE / "action_plugins/concurrent_commands.py")
    given = {"source": MODULE.read_text(), "args": [commands, timeout, max_workers]}
    done = subprocess.run([sys.executable, "-I", "-S", "-c", action.BOOTSTRAP],
                          input=json.dumps(given), capture_output=True, text=True, check=False,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    return {"changed": False, "results": json.loads(done.stdout)}


@pytest.mark.parametrize("runner", [run_module, run_direct], ids=["module", "direct"])
def test_results_come_in_order_with_item_rc_and_output(tmp_path, runner):
    out = runner(
        tmp_path,
        commands=[
            {"item": {"name": "m2"}, "argv": ["sh", "-c", "echo m2; echo oops >&2"]},
            {"item": "fails", "argv": ["sh", "-c", "exit 3"]},
            {"item": "missing", "argv": [str(tmp_path / "no-such-program")]},
            {"item": "hangs", "argv": ["sleep", "30"]},
        ],
        timeout=1,
    )
    assert out["changed"] is False
    by_item = [r["item"] for r in out["results"]]
    assert by_item == [{"name": "m2"}, "fails", "missing", "hangs"]
    first, fails, missing, hangs = out["results"]
    assert (first["rc"], first["stdout"], first["stderr"]) == (0, "m2", "oops")
    assert first["cmd"] == ["sh", "-c", "echo m2; echo oops >&2"]
    assert fails["rc"] == 3
    assert missing["rc"] == -1 and "cannot run" in missing["msg"]
    assert hangs["rc"] == -1 and hangs["msg"] == "no answer within 1 s" and hangs["timed_out"]
    assert "timed_out" not in fails


def waits_for(tmp_path, me, other):
    # Announces itself, then waits for the other command: only succeeds when both run at once.
    script = f"touch {tmp_path / me}; while [ ! -e {tmp_path / other} ]; do sleep 0.05; done"
    return {"item": me, "argv": ["sh", "-c", script]}


def test_commands_run_side_by_side(tmp_path):
    pair = [waits_for(tmp_path, "a", "b"), waits_for(tmp_path, "b", "a")]
    out = run_module(tmp_path, commands=pair, timeout=60)
    assert [r["rc"] for r in out["results"]] == [0, 0]


def test_one_worker_runs_them_one_after_the_other(tmp_path):
    pair = [waits_for(tmp_path, "a", "b"), waits_for(tmp_path, "b", "a")]
    out = run_module(tmp_path, commands=pair, timeout=2, max_workers=1)
    assert [r["rc"] for r in out["results"]] == [-1, 0]


STALE_PYTHON_PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Facts from before the host's Python moved
      ansible.builtin.set_fact:
        discovered_interpreter_python: {gone}
        cacheable: true
    - name: Run a command
      concurrent_commands:
        commands: [{{item: a, argv: [echo, hello]}}]
      register: ran
    - name: Show it
      ansible.builtin.debug:
        msg: "{{{{ ran.results[0].stdout | trim }}}}"
"""


def test_a_python_gone_since_the_facts_is_discovered_again(tmp_path):
    """The facts name a Python that is no longer there (rc 127 from the direct run): the module
    runs with a Python found afresh (with the facts' one, it could not start either)."""
    gone = tmp_path / "gone" / "python3"
    play = tmp_path / "play.yml"
    play.write_text(STALE_PYTHON_PLAY.format(gone=gone))
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")  # not the project's
    # Named in an inventory: the implicit localhost would be given the controller's Python.
    (tmp_path / "hosts").write_text("localhost ansible_connection=local\n")
    # Discovery looks along PATH: this environment's Python first, not a shim of the machine's.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
           "ANSIBLE_LIBRARY": str(ROLE / "library"),
           "ANSIBLE_ACTION_PLUGINS": str(ROLE / "action_plugins"),
           "ANSIBLE_COLLECTIONS_PATH": str(ROLE.parents[1]),  # the loader the plugin imports
           "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default",
           "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg")}
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"),
                           "-i", str(tmp_path / "hosts"), str(play)],
                          capture_output=True, text=True, env=env, check=False, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"msg": "hello"' in done.stdout, done.stdout
