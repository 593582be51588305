"""Jinja filters that plan and judge a training launch (roles/launch, playbooks/train.yml).

Pure functions over plain data (cluster_hosts entries plus per-host facts), unit-tested in
tests/unit/test_launch_filters.py. The mpirun part of the command comes from the shared mpi.py's
mpirun_argv; these filters add what is specific to running `python -m train`.

A request is one dict under the names users type with -e (the `request` options of
meta/argument_specs.yml). Every option that is not the launcher's own becomes the train flag of
the same name (grad_bucket_bytes -> --grad-bucket-bytes), so a new train flag needs no code here.
"""

import posixpath
import re
import shlex

BACKENDS = ("mpi", "ring")
# Options of the launch itself; every other request option is a `python -m train` flag.
LAUNCHER_OPTIONS = ("run_name", "np", "backend", "mpi_extra_args", "time_limit")
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Environment variable that holds a process's rank under each launcher.
RANK_VARIABLE = "${OMPI_COMM_WORLD_RANK:-$MLX_RANK}"
TAIL_LINES = 15


# ---------------------------------------------------------------- request validation


def _given(value):
    return value is not None and value != "" and value != []


def _int(value, minimum):
    """int >= minimum from an int or a digit string (extra vars arrive as strings), else None."""
    if isinstance(value, bool):
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if number >= minimum else None


def _float(value):
    if isinstance(value, bool):
        return None
    try:
        number = float(str(value).strip())
    except ValueError:
        return None
    return number if number > 0 else None


def _bool(value):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1", "on"):
        return True
    if text in ("false", "no", "0", "off", ""):
        return False
    return None


def launch_extra_args(value):
    """mpi_extra_args as a list: a string is split like a shell would."""
    if not _given(value):
        return []
    if isinstance(value, str):
        return shlex.split(value)
    return [str(arg) for arg in value]


def launch_request(spec, values):
    """The request: {option: the value given with -e, else the spec's default, else None}.

    spec: the `request` options of meta/argument_specs.yml; values: the extra vars in that order.
    A bool option given as text ("true", "no") becomes a bool; a bad value is left for
    launch_request_errors to name.
    """
    request = {}
    for (name, option), value in zip(spec.items(), values, strict=True):
        value = value if _given(value) else option.get("default")
        if option.get("type") == "bool" and _bool(value) is not None:
            value = _bool(value)
        request[name] = value
    return request


def launch_np(value, hosts):
    """Ranks to start: the np the user gave, else every slot of the cluster."""
    total = sum(h["slots"] for h in hosts)
    return _int(value, 1) if _given(value) else total


def launch_request_errors(request, hosts):
    """Every problem with a train.yml request, one message per variable with its fix.

    request: the extra vars (None = not given) under the names users pass with -e.
    hosts: cluster_hosts entries. An empty list means the request can be launched.
    """
    errors = []
    positive = {"steps": 1, "batch_size": 1, "seed": 0, "time_limit": 1, "grad_bucket_bytes": 0,
                "eval_every": 0, "checkpoint_every": 0, "log_every": 1}
    for name, minimum in positive.items():
        value = request.get(name)
        if _given(value) and _int(value, minimum) is None:
            kind = "a positive integer" if minimum else "an integer >= 0"
            errors.append(f"{name}: {value!r} is not {kind} — e.g. -e {name}={max(minimum, 1)}0")
    if _given(request.get("lr")) and _float(request["lr"]) is None:
        errors.append(f"lr: {request['lr']!r} is not a positive number — e.g. -e lr=0.001")
    if _given(request.get("resume")) and _bool(request["resume"]) is None:
        errors.append(f"resume: {request['resume']!r} is not true or false — e.g. -e resume=true")
    for name in ("model", "dataset", "data"):
        value = request.get(name)
        if _given(value) and (not isinstance(value, str) or value != value.strip()):
            errors.append(f"{name}: {value!r} must be a name or path without surrounding spaces")
    run_name = request.get("run_name")
    if _given(run_name) and not RUN_NAME.match(str(run_name)):
        errors.append(
            f"run_name: {run_name!r} is not a plain directory name — use letters, digits, '.', "
            "'_' and '-', starting with a letter or digit"
        )
    backend = request.get("backend")
    if _given(backend) and backend not in BACKENDS:
        errors.append(
            f"backend: {backend!r} is not one of {', '.join(BACKENDS)} — e.g. -e backend=ring"
        )
    errors += _np_errors(request, hosts, backend or "mpi")
    extra = request.get("mpi_extra_args")
    if _given(extra):
        if backend == "ring":
            errors.append(
                "mpi_extra_args: only the mpi backend runs mpirun — drop it or use backend=mpi"
            )
        elif not isinstance(extra, (str, list)):
            errors.append(f"mpi_extra_args: {extra!r} must be a string or a list of strings")
        else:
            try:
                launch_extra_args(extra)
            except ValueError as e:
                errors.append(f"mpi_extra_args: {extra!r} cannot be split like a shell would ({e})")
    return errors


def _np_errors(request, hosts, backend):
    slots = ", ".join(f"{h['name']}: {h['slots']}" for h in hosts if h["slots"] > 0)
    total = sum(h["slots"] for h in hosts)
    value = request.get("np")
    if not _given(value):
        return []
    np = _int(value, 1)
    if np is None:
        return [f"np: {value!r} is not a positive integer — e.g. -e np={total}, or leave it out"]
    if backend == "ring" and np != total:
        return [
            f"np: the ring backend starts one rank per slot of hosts.json ({total}; {slots}), "
            f"not {np} — leave np out, or change mpi_slots and re-run setup.yml"
        ]
    if np > total:
        return [
            f"np: {np} ranks but the cluster has only {total} slots ({slots}) — lower np, or "
            "raise mpi_slots in the inventory and re-run setup.yml"
        ]
    if _given(request.get("batch_size")):
        batch = _int(request["batch_size"], 1)
        if batch and batch % np:
            return [
                f"batch_size: {batch} does not split over {np} ranks — use a multiple of {np}"
            ]
    return []


def launch_path_name(path):
    """Last component of a path, also for a directory given with a trailing slash."""
    return posixpath.basename(str(path).rstrip("/"))


def launch_run_name(model, stamp):
    """Default run name: the model's last path component and a timestamp."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", launch_path_name(model or "train"))
    return f"{base.strip('.-') or 'train'}-{stamp}"


# ---------------------------------------------------------------- per-host consistency


def launch_consistency_errors(infos, layout, backend="mpi"):
    """Hosts that would run a different Open MPI or train/ package than the others.

    infos: per ranked host {name, openmpi_version, openmpi_prefix, train_diff (tree_diff of its
    train/ against the controller's)}; layout: cluster_layout of the ranked hosts.
    """
    errors = []
    if layout["error"]:
        errors.append(layout["error"])
    if backend == "mpi":
        for key, what in (("openmpi_version", "Open MPI version"),
                          ("openmpi_prefix", "Open MPI prefix")):
            values = {i[key] for i in infos}
            if len(values) > 1:
                listing = ", ".join(f"{i['name']}: {i[key]}" for i in infos)
                errors.append(
                    f"{what} differs between hosts ({listing}) — mpirun starts its daemons from "
                    "one prefix and mixed versions break the wire protocol; install the same "
                    "Open MPI everywhere (re-run setup.yml)"
                )
    stale = {i["name"]: i["train_diff"] for i in infos if i["train_diff"]}
    if stale:
        listing = "; ".join(f"{name}: {', '.join(diff[:3])}" for name, diff in stale.items())
        errors.append(
            f"train/ package on {', '.join(stale)} differs from the controller's train/ "
            f"({listing}) — re-run setup.yml to copy it to every host"
        )
    return errors


# ---------------------------------------------------------------- the command


def launch_train_args(request, out, data=None, model=None):
    """`python -m train` flags for the values the user gave (the package has defaults): each
    option that is not the launcher's, under its own name (batch_size -> --batch-size).

    data / model: the per-host path of a controller path copied to every host, if any.
    """
    args = []
    copied = {"data": data, "model": model}
    for name, given in request.items():
        value = copied.get(name) or given
        if name in LAUNCHER_OPTIONS or not _given(value) or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    return args + ["--out", str(out)]


def launch_rank_program(layout, log_dir):
    """argv every rank runs: cd to this host's work dir, log to log_dir/rank.N.log, exec Python.

    A /bin/sh wrapper expands $HOME on each host (homes may differ) and picks the rank from
    the launcher's environment; "$@" keeps the train arguments exactly as given.
    """
    log = f"{shlex.quote(log_dir)}/rank.{RANK_VARIABLE}.log"
    script = (
        f"cd {layout['work_dir']} && mkdir -p {shlex.quote(log_dir)} && "
        f"export PYTHONUNBUFFERED=1 && exec {layout['python']} -m train \"$@\" >{log} 2>&1"
    )
    return ["/bin/sh", "-c", script, "train"]


def launch_mpi_options(hosts, infos, np, hostfile, version, libmpi, interface, extra_args=None):
    """Keyword arguments for mpi.py's mpirun_argv.

    The interface flags apply only when ranks talk across hosts over Thunderbolt addresses;
    --allow-run-as-root only when a host logs in as root; MLX_MPI_LIBNAME travels with -x
    because macOS SIP strips DYLD_* variables through /bin/sh.
    """
    ranked = [h for h in hosts if h["slots"] > 0]
    across = len(ranked) > 1 and any(h.get("thunderbolt_ip") for h in ranked)
    return {
        "hostfile": hostfile,
        "np": int(np),
        "version": version,
        "interface": interface if across else None,
        "as_root": any(i["user"] == "root" for i in infos),
        "env": {"MLX_MPI_LIBNAME": libmpi},
        "extra_args": launch_extra_args(extra_args),
    }


def launch_ring_argv(mlx_launch, hosts_json):
    """mlx.launch with the rendered hosts.json; the caller appends the rank program."""
    return [str(mlx_launch), "--hostfile", str(hosts_json), "--backend", "ring", "--"]


def launch_shell_command(argv):
    """argv as one shell command, an option and its value per line, for command.sh."""
    groups = []
    for word in map(shlex.quote, map(str, argv)):
        option = groups and groups[-1].startswith("-") and " " not in groups[-1]
        if option and not word.startswith("-"):
            groups[-1] += " " + word
        else:
            groups.append(word)
    return " \\\n  ".join(groups)


def launch_rank_hosts(hosts, np):
    """Inventory name of each rank: --map-by slot (and mlx.launch) fill hosts in order."""
    names = [h["name"] for h in hosts for _ in range(h["slots"])]
    return names[: int(np)]


# ---------------------------------------------------------------- the verdict


# mpirun (4.x) / prterun (5.x): "... noticed that process rank 2 with PID 42 on node h3 exited
# on signal 9 (Killed)."; non-zero exit: "Process name: [[123,1],2]\n  Exit code: 3".
# prterun wraps its lines anywhere, hence \s+ between words.
MPI_SIGNAL = re.compile(
    r"process\s+rank\s+(\d+)\s+with\s+PID\s+\d+\s+on\s+node\s+(\S+)\s+exited\s+on\s+signal\s+(\d+)"
    r"(?:\s+\(([^)]*)\))?"
)
MPI_EXIT = re.compile(r"Process name:\s*\[[^\n]*,(\d+)\]\s*\n\s*Exit code:\s*(\d+)")
# mlx.launch (which itself exits 0): "Node with rank 1 exited with code 255" / "... was killed".
RING_EXIT = re.compile(r"Node with rank (\d+) (?:exited with code (\d+)|was killed)")


def launch_failed_rank(log_text):
    """(rank, reason) of the first rank the launcher reported as failed, or (None, None)."""
    text = ANSI.sub("", log_text or "")
    found = []
    for match in MPI_SIGNAL.finditer(text):
        name = f" ({match.group(4)})" if match.group(4) else ""
        reason = f"killed by signal {match.group(3)}{name}"
        found.append((match.start(), int(match.group(1)), reason))
    for match in MPI_EXIT.finditer(text):
        found.append((match.start(), int(match.group(1)), f"exited with code {match.group(2)}"))
    for match in RING_EXIT.finditer(text):
        code = match.group(2)
        reason = f"exited with code {code}" if code else "was killed by mlx.launch"
        found.append((match.start(), int(match.group(1)), reason))
    if not found:
        return None, None
    _, rank, reason = min(found)
    return rank, reason


def _tail(text, lines=TAIL_LINES):
    kept = [line for line in ANSI.sub("", text or "").splitlines() if line.strip()]
    return "\n".join("    " + line for line in kept[-lines:])


def launch_failure_report(job, launch_log, rank_logs, rank_hosts):
    """Why the job failed, naming the host and rank, with that rank's last lines; None if fine.

    job: {rc, timed_out, time_limit, summary (bool: summary.json written), hung_at_exit (bool:
    the launcher was stopped because it outlived the finished job)}.
    rank_logs: {rank (int or str): log text}. launch_log: the launcher's own output.
    """
    if job.get("hung_at_exit") and job["summary"]:
        return None  # every rank finished; only the launcher's bookkeeping hung
    rank, reason = launch_failed_rank(launch_log)
    ok = not job["timed_out"] and int(job["rc"]) == 0 and rank is None and job["summary"]
    if ok:
        return None
    logs = {int(k): v for k, v in (rank_logs or {}).items()}
    if job["timed_out"]:
        head = f"the job hit the time limit of {job['time_limit']} s and was stopped on every host"
    elif rank is not None:
        host = rank_hosts[rank] if rank < len(rank_hosts) else "an unknown host"
        head = f"rank {rank} on {host} {reason}"
    else:
        rank = next((r for r in sorted(logs) if "Traceback" in logs[r] or "error" in logs[r]), None)
        cause = f"launcher exited with code {job['rc']}" if int(job["rc"]) else "launcher exited 0"
        head = f"the {cause} without a summary.json"
        if rank is not None:
            head += f"; rank {rank} on {rank_hosts[rank]} reported an error"
    parts = [f"Training failed: {head}."]
    if rank is not None and logs.get(rank, "").strip():
        parts.append(f"Last lines of rank {rank} ({rank_hosts[rank]}):\n{_tail(logs[rank])}")
    if launch_log and launch_log.strip():
        parts.append(f"Last lines of the launcher:\n{_tail(launch_log, 10)}")
    return "\n".join(parts)


def launch_summary_lines(summary, run_dir):
    """A few readable lines from summary.json for the end of the play."""
    def number(key, fmt):
        value = summary.get(key)
        return fmt.format(value) if isinstance(value, (int, float)) else "n/a"

    accuracy = summary.get("eval_accuracy")
    lines = [
        f"final loss {number('train_loss', '{:.4f}')}, eval loss {number('eval_loss', '{:.4f}')}"
        + (f", eval accuracy {accuracy:.1%}" if isinstance(accuracy, (int, float)) else ""),
        f"world size {summary.get('world_size', 'n/a')}, steps {summary.get('steps', 'n/a')}, "
        f"{number('samples_per_s', '{:.0f}')} samples/s, "
        f"{number('wall_time_s', '{:.1f}')} s wall time",
        f"results: {run_dir}",
    ]
    return lines


class FilterModule:
    def filters(self):
        return {
            "launch_consistency_errors": launch_consistency_errors,
            "launch_extra_args": launch_extra_args,
            "launch_failed_rank": launch_failed_rank,
            "launch_failure_report": launch_failure_report,
            "launch_mpi_options": launch_mpi_options,
            "launch_np": launch_np,
            "launch_path_name": launch_path_name,
            "launch_rank_hosts": launch_rank_hosts,
            "launch_rank_program": launch_rank_program,
            "launch_request": launch_request,
            "launch_request_errors": launch_request_errors,
            "launch_ring_argv": launch_ring_argv,
            "launch_run_name": launch_run_name,
            "launch_shell_command": launch_shell_command,
            "launch_summary_lines": launch_summary_lines,
            "launch_train_args": launch_train_args,
        }
