"""Address filters for rails and management networks; every computation goes through netaddr."""

from ansible.errors import AnsibleFilterError

try:
    import netaddr
except ImportError:  # pragma: no cover - reported when the filter is used
    netaddr = None

# Hosts get addresses from this offset upward in every rail subnet: .0 is the network, the first
# ten addresses are left for gateways and switches (docker's bridge takes .1 in the lab).
RAIL_HOST_OFFSET = 11


def _network(subnet, what):
    if netaddr is None:
        raise AnsibleFilterError("%s: the netaddr Python package is required" % what)
    try:
        return netaddr.IPNetwork(str(subnet))
    except (netaddr.AddrFormatError, ValueError, TypeError) as exc:
        raise AnsibleFilterError("%s: %r is not a valid subnet (%s)" % (what, subnet, exc))


def rail_address(subnet, index, offset=RAIL_HOST_OFFSET, prefix=False):
    """Address of node `index` in `subnet`: the (offset + index)-th address of the network."""
    net = _network(subnet, "rail_address")
    try:
        position = int(offset) + int(index)
    except (TypeError, ValueError):
        raise AnsibleFilterError("rail_address: node index %r is not an integer" % (index,))
    if int(index) < 0:
        raise AnsibleFilterError("rail_address: node index %r is negative" % (index,))
    last_host = net.size - 2 if net.version == 4 and net.prefixlen < 31 else net.size - 1
    if position > last_host:
        raise AnsibleFilterError(
            "rail_address: node index %s does not fit in %s (room for %d nodes from offset %d)"
            % (index, net, max(last_host - int(offset) + 1, 0), int(offset)))
    address = net[position]
    return "%s/%d" % (address, net.prefixlen) if prefix else str(address)


def rail_capacity(subnet, offset=RAIL_HOST_OFFSET):
    """How many nodes fit in `subnet` at the rail offset."""
    net = _network(subnet, "rail_capacity")
    last_host = net.size - 2 if net.version == 4 and net.prefixlen < 31 else net.size - 1
    return max(last_host - int(offset) + 1, 0)


class FilterModule(object):
    """Rail and management address filters."""

    def filters(self):
        return {
            "rail_address": rail_address,
            "rail_capacity": rail_capacity,
        }
