"""Run the concurrent_commands module's commands with the host's Python directly, when its path
is known (the interpreter setting, or the facts): one connection round trip, no module start.

A module run costs each host a Python start-up with Ansible's imports: on a small machine running
several hosts, a third of a second per task, which every train.yml waits for in its preflight.
The commands, their timeout and the results are the module's own (library/concurrent_commands.py,
whose run_all this sends); without a known interpreter, with become, environment, delegation or
async, the module runs as usual.
"""

import json
import shlex

from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.action import ActionBase

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load

# Runs on the host: the module's source and the arguments come on stdin.
BOOTSTRAP = (
    "import json, sys\n"
    "given = json.load(sys.stdin)\n"
    "module = {'__name__': 'concurrent_commands'}\n"
    "exec(compile(given['source'], 'concurrent_commands.py', 'exec'), module)\n"
    "json.dump(module['run_all'](*given['args']), sys.stdout)\n"
)


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        python = self._known_python(task_vars)
        if python is None:
            result.update(self._execute_module(task_vars=task_vars))
            return result
        path = self._shared_loader_obj.module_loader.find_plugin("concurrent_commands")
        module = load(path)
        _, args = self.validate_argument_spec(argument_spec=module.ARGUMENT_SPEC)
        with open(path, encoding="utf-8") as source:
            given = {"source": source.read(),
                     "args": [args["commands"], args["timeout"], args["max_workers"]]}
        ran = self._low_level_execute_command(
            f"{shlex.quote(python)} -c {shlex.quote(BOOTSTRAP)}", sudoable=False,
            in_data=to_bytes(json.dumps(given)))
        if ran["rc"] == 255:  # ssh itself failed
            raise AnsibleConnectionFailure(to_text(ran.get("stderr")) or "ssh exited 255")
        if ran["rc"] == 127:  # that Python is gone (the facts are older): discover it again
            facts = {k: v for k, v in (task_vars.get("ansible_facts") or {}).items()
                     if k != "discovered_interpreter_python"}
            result.update(self._execute_module(task_vars={**task_vars, "ansible_facts": facts}))
            return result
        if ran["rc"] != 0:
            raise AnsibleActionFail(f"{python} could not run the commands: "
                                    f"{to_text(ran.get('stderr')).strip()[-2000:]}")
        result.update(changed=False, results=json.loads(to_text(ran["stdout"])))
        return result

    def _known_python(self, task_vars):
        """The host's Python when nothing but the module start is skipped, else None."""
        task = self._task
        if (task.become or self._play_context.become or task.delegate_to
                or any(task.environment or []) or task.async_val):
            return None
        configured = self._templar.template(task_vars.get("ansible_python_interpreter") or "")
        if configured and not str(configured).startswith("auto"):
            return str(configured)
        facts = task_vars.get("ansible_facts") or {}
        return (facts.get("discovered_interpreter_python")
                or (facts.get("python") or {}).get("executable"))
