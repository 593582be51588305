"""Report of the ping matrix over the Thunderbolt interface (commands: cluster/probes.py)."""

import re

# Statistics line of a ping that got no answer: iputils "1 packets transmitted, 0 received",
# macOS "1 packets transmitted, 0 packets received" (their exit codes differ: 1 and 2).
_NO_REPLY = re.compile(r"\b0 (packets )?received")


def thunderbolt_ping_failures(results, source):
    """Results of the ping task (items: cluster_hosts entries) ->
    ["source -> peer (address): reason", ...]."""
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
        peer = result["item"]
        failures.append(f"{source} -> {peer['name']} ({peer['thunderbolt_ip']}): {reason}")
    return failures


class FilterModule:
    def filters(self):
        return {"thunderbolt_ping_failures": thunderbolt_ping_failures}
