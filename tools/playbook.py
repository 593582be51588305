"""Run the project's playbooks through ansible-runner and read what happened from its events."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import ansible_runner

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class PlaybookRun:
    status: str
    rc: int
    events: list[dict]
    stdout: str

    @property
    def stats(self) -> dict:
        """The play recap: {'ok': {host: n}, 'changed': {...}, 'failures': {...}, ...}."""
        recap = [e for e in self.events if e.get("event") == "playbook_on_stats"]
        return recap[-1]["event_data"] if recap else {}

    def task_results(self, event: str = "runner_on_ok") -> list[dict]:
        return [e["event_data"] for e in self.events if e.get("event") == event]

    def changed(self) -> list[tuple[str, str]]:
        """(host, task) of every task result that reported a change."""
        return [
            (data.get("host"), data.get("task"))
            for data in self.task_results()
            if data.get("res", {}).get("changed")
        ]

    def facts_set_by(self, task: str) -> dict:
        """The facts the task named `task` set (set_fact) on the one host it ran on."""
        [facts] = [data["res"]["ansible_facts"] for data in self.task_results()
                   if data.get("task") == task]
        return facts

    def failures(self) -> list[dict]:
        return self.task_results("runner_on_failed") + self.task_results("runner_on_unreachable")

    def failure_messages(self) -> list[str]:
        """The msg of every failed task, and of each failed item of a failed loop (whose own msg
        is only 'One or more items failed')."""
        results = [f["res"] for f in self.failures()]
        results += [item for res in results for item in res.get("results", [])
                    if isinstance(item, dict) and item.get("failed")]
        return [str(res["msg"]) for res in results if res.get("msg")]


def run_playbook(
    playbook: str,
    inventory: str | Path,
    private_dir: Path,
    extravars: dict | None = None,
    cmdline: str | None = None,
    passwords: dict[str, str] | None = None,
) -> PlaybookRun:
    """Run ROOT/<playbook> with the project's ansible.cfg; never raises on a failed play.

    passwords: {prompt regex: answer} for what ansible-playbook asks, e.g. with -K
    {r"^BECOME password": "pw"}.
    """
    private_dir.mkdir(parents=True, exist_ok=True)
    runner = ansible_runner.run(
        private_data_dir=str(private_dir),
        project_dir=str(ROOT),
        playbook=str(ROOT / playbook),
        inventory=str(inventory),
        extravars=extravars or {},
        cmdline=cmdline,
        passwords=passwords or {},
        envvars={
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            # ansible-runner finds ansible-playbook on PATH: use the one beside this Python.
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        },
        quiet=not os.environ.get("PLAYBOOK_VERBOSE"),
        timeout=3000,
    )
    return PlaybookRun(
        status=runner.status,
        rc=runner.rc,
        events=list(runner.events),
        stdout=runner.stdout.read(),
    )
