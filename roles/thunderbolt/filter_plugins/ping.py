"""Ping matrix over the Thunderbolt interface: one ping per ordered pair of hosts."""

import re

# Statistics line of a ping that got no answer: iputils "1 packets transmitted, 0 received",
# macOS "1 packets transmitted, 0 packets received" (their exit codes differ: 1 and 2).
_NO_REPLY = re.compile(r"\b0 (packets )?received")


def thunderbolt_ping_argv(system, interface, address, timeout=2):
    """argv that sends one ping to `address` out of `interface` and gives up after `timeout` s.

    Linux (iputils): -I binds to the interface, -W is the reply timeout in seconds.
    macOS: -b binds to the interface, -t is the overall timeout in seconds (-W is in ms there).
    """
    timeout = str(int(timeout))
    if system == "Darwin":
        return ["ping", "-c", "1", "-t", timeout, "-b", interface, address]
    if system == "Linux":
        return ["ping", "-c", "1", "-W", timeout, "-I", interface, address]
    raise ValueError(f"thunderbolt: no ping flags for system {system!r} (Darwin or Linux)")


def thunderbolt_ping_commands(peers, hostvars, system, interface, timeout=2):
    """concurrent_commands entries that ping each peer's thunderbolt_ip; item = the peer's name."""

    def ping(peer):
        return thunderbolt_ping_argv(system, interface, hostvars[peer]["thunderbolt_ip"], timeout)

    return [{"item": peer, "argv": ping(peer)} for peer in peers]


def thunderbolt_ping_failures(results, source):
    """Loop results of the ping task -> ["source -> peer (address): reason", ...]."""
    failures = []
    for result in results:
        if result.get("skipped") or result.get("rc") == 0:
            continue
        output = (result.get("stdout", "") + "\n" + result.get("stderr", "")).strip()
        lines = [line for line in output.splitlines() if line.strip()]
        if _NO_REPLY.search(output):
            reason = "no reply"
        else:
            reason = lines[-1] if lines else result.get("msg", "ping failed")
        address = result["cmd"][-1] if result.get("cmd") else "?"
        failures.append(f"{source} -> {result['item']} ({address}): {reason}")
    return failures


class FilterModule:
    def filters(self):
        return {
            "thunderbolt_ping_argv": thunderbolt_ping_argv,
            "thunderbolt_ping_commands": thunderbolt_ping_commands,
            "thunderbolt_ping_failures": thunderbolt_ping_failures,
        }
