#!/usr/bin/python
"""Run several commands at once on the target, each bounded by a timeout.

The SSH and ping matrices probe every other host from every host. As a task loop that is
one module run per peer, so a host's share of the work grows with the cluster; this runs
all of a host's probes in one module run, side by side. The action plugin of the same name
runs run_all with the host's Python directly when it knows it, without a module start.
"""

import subprocess
from concurrent.futures import ThreadPoolExecutor

DOCUMENTATION = r"""
module: concurrent_commands
short_description: Run several commands at once, each bounded by a timeout
description:
  - Runs each command (an argv list, no shell) in its own process, up to I(max_workers) at a
    time, and returns one result per command in the shape of a registered task loop.
  - Never changes anything itself and never fails because a command failed; judge the results.
options:
  commands:
    description: Commands to run; C(item) is returned as it is, to tell the results apart.
    type: list
    elements: dict
    required: true
    suboptions:
      argv:
        description: The command and its arguments.
        type: list
        elements: str
        required: true
      item:
        description: Anything that names this command in the results.
        type: raw
  timeout:
    description: Seconds after which a command is killed and reported with rc -1.
    type: int
    default: 30
  max_workers:
    description: How many commands run at the same time.
    type: int
    default: 16
"""

RETURN = r"""
results:
  description: One entry per command, in the order given.
  type: list
  elements: dict
  returned: always
  sample: [{item: m2, cmd: [hostname], rc: 0, stdout: m2, stderr: ""}]
  contains:
    timed_out:
      description: Set when the command was killed at I(timeout); rc is -1 then.
      type: bool
"""


def run(command, timeout):
    result = {"item": command.get("item"), "cmd": command["argv"]}
    try:
        done = subprocess.run(
            command["argv"],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        result.update(rc=done.returncode, stdout=done.stdout, stderr=done.stderr)
    except subprocess.TimeoutExpired:
        result.update(rc=-1, stdout="", stderr="", msg=f"no answer within {timeout} s",
                      timed_out=True)
    except OSError as error:
        result.update(rc=-1, stdout="", stderr="", msg=f"cannot run {command['argv'][0]}: {error}")
    result["stdout"] = result["stdout"].rstrip("\n")
    result["stderr"] = result["stderr"].rstrip("\n")
    return result


def run_all(commands, timeout, max_workers):
    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        return list(pool.map(lambda command: run(command, timeout), commands))


ARGUMENT_SPEC = {
    "commands": {
        "type": "list",
        "elements": "dict",
        "required": True,
        "options": {
            "argv": {"type": "list", "elements": "str", "required": True},
            "item": {"type": "raw"},
        },
    },
    "timeout": {"type": "int", "default": 30},
    "max_workers": {"type": "int", "default": 16},
}


def main():
    # Imported here: the action plugin runs run_all without Ansible on the host.
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    results = run_all(params["commands"], params["timeout"], params["max_workers"])
    module.exit_json(changed=False, results=results)


if __name__ == "__main__":
    main()
