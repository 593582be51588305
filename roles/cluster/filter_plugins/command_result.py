"""Reading a command's registered result: did it hang, and what is the gist of what it printed.

check.yml (doctor rows) and bench.yml (failed runs) both read command results through
`command_result`, which adds `timed_out` and `gist` to the result. Pure functions, unit-tested in
tests/unit/test_command_result.py.
"""

import json


def command_timed_out(result):
    """True when an async-bounded task or a concurrent_commands command hit its time limit."""
    result = result or {}
    msg = str(result.get("msg", ""))
    return bool(result.get("timed_out")) or "Timeout exceeded" in msg or (
        "did not complete within the requested time" in msg)


def last_line(text, limit=160):
    """Last line that says something (Open MPI frames its messages with lines of dashes)."""
    lines = [line.strip() for line in str(text or "").splitlines()
             if any(c.isalnum() for c in line)]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def command_gist(text):
    """The gist of an error output: the start of Open MPI's first framed message, which says
    what went wrong (its trailing lines are generic), else the last line that says something."""
    lines = [line.strip() for line in str(text or "").splitlines()]
    frames = [i for i, line in enumerate(lines) if line and set(line) == {"-"}]
    if len(frames) >= 2:
        block = [line for line in lines[frames[0] + 1:frames[1]] if line]
        if block:
            # "Open RTE was unable to open the hostfile:" needs its next line, the path.
            gist = " ".join(block[:2]) if block[0].endswith(":") else block[0]
            return gist if len(gist) <= 200 else gist[:197] + "..."
    return last_line(text)


def command_result(result):
    """The registered result plus what callers ask of it: timed_out (bool), gist (of stderr,
    else stdout), stdout_last and stderr_last (their last meaningful lines)."""
    result = dict(result or {})
    result.update(
        timed_out=command_timed_out(result),
        gist=command_gist(result.get("stderr")) or command_gist(result.get("stdout")),
        stdout_last=last_line(result.get("stdout")),
        stderr_last=last_line(result.get("stderr")),
    )
    return result


def results_by_item(results):
    """{item: result} of a concurrent_commands run whose items are names (a probe per name)."""
    return {result["item"]: result for result in results if isinstance(result.get("item"), str)}


def json_result(result):
    """What a probe printed as JSON (versions.py, tree_checksums.py), None when it failed."""
    result = result or {}
    return json.loads(result["stdout"]) if result.get("rc") == 0 else None


class FilterModule:
    def filters(self):
        return {"command_result": command_result, "results_by_item": results_by_item,
                "json_result": json_result}
