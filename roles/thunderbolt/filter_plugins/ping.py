"""Reports of the pings setup sends over Thunderbolt (commands: cluster/probes.py): the bridge
topology's matrix of host pairs, and the cables topology's ping across each cable."""

import ipaddress
import re

# Statistics line of a ping that got no answer: iputils "1 packets transmitted, 0 received",
# macOS "1 packets transmitted, 0 packets received" (their exit codes differ: 1 and 2).
_NO_REPLY = re.compile(r"\b0 (packets )?received")


def _reason(result):
    output = (result.get("stdout", "") + "\n" + result.get("stderr", "")).strip()
    if _NO_REPLY.search(output):
        return "no reply"
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else result.get("msg", "ping failed")


def thunderbolt_ping_failures(results, source):
    """Results of the ping task (items: cluster_hosts entries) ->
    ["source -> peer (address): reason", ...]."""
    failures = []
    for result in results:
        if result.get("skipped") or result.get("rc") == 0:
            continue
        peer = result["item"]
        failures.append(f"{source} -> {peer['name']} ({peer['thunderbolt_ip']}): {_reason(result)}")
    return failures


def cable_ping_failures(results, source):
    """Results of the ping across each cable (items: the source's cable ends) ->
    [{"network", "ends": [[host, interface, address], [peer, interface, address]], "direction",
    "reason"}] for each ping that got no reply."""
    return [
        {"network": end["network"],
         "ends": sorted([[source, end["interface"], end["address"]],
                         [end["peer"], end["peer_interface"], end["peer_address"]]],
                        key=lambda e: ipaddress.ip_address(e[2])),
         "direction": f"{source} -> {end['peer']}",
         "reason": _reason(result)}
        for result in results
        if not result.get("skipped") and result.get("rc") != 0
        for end in [result["item"]]
    ]


def cable_ping_report(failures):
    """cable_ping_failures of all hosts -> one line per broken cable, naming both ends (host,
    interface, address) and the pings that failed, in the plan's order."""
    cables = {}
    for failure in failures:
        cable = cables.setdefault(failure["network"], {"ends": failure["ends"], "pings": []})
        cable["pings"].append(f"{failure['direction']}: {failure['reason']}")
    return [
        f"{' - '.join(' '.join(end) for end in cable['ends'])} ({network}): "
        f"{'; '.join(sorted(cable['pings']))}"
        for network, cable in sorted(cables.items(),
                                     key=lambda item: ipaddress.ip_network(item[0]))
    ]


class FilterModule:
    def filters(self):
        return {
            "cable_ping_failures": cable_ping_failures,
            "cable_ping_report": cable_ping_report,
            "thunderbolt_ping_failures": thunderbolt_ping_failures,
        }
