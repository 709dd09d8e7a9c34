# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure parsers for RDMA tool output and sysfs values (text in, dicts out)."""

from __future__ import absolute_import, division, print_function

import re

from ansible.module_utils.gpu_parsers import ParseError, utf8_input

__metaclass__ = type

IB_MTUS = (256, 512, 1024, 2048, 4096)
# Headers the kernel subtracts from the netdev MTU before picking the RoCE MTU
# (ib_core iboe_get_mtu): GRH 40 + UDP 8 + BTH 12 + XRC ext 4 + AtomicETH 28 + ICRC 4 = 96.
ROCE_HEADERS = 40 + 8 + 12 + 4 + 28 + 4


def roce_active_mtu(netdev_mtu):
    """Largest IB MTU (256..4096) that fits netdev_mtu minus RoCE headers; None if none fits.
    9000 -> 4096, 4200 -> 4096, 4000 -> 2048, 1500 -> 1024."""
    if netdev_mtu is None:
        return None
    room = int(netdev_mtu) - ROCE_HEADERS
    fits = [m for m in IB_MTUS if m <= room]
    return fits[-1] if fits else None


def parse_sysfs_state(value, what):
    """'4: ACTIVE' -> (4, 'ACTIVE')."""
    m = re.match(r'^\s*(\d+):\s*(\S.*?)\s*$', value or '')
    if not m:
        raise ParseError('%s: cannot parse %r (expected "<n>: <NAME>")' % (what, value))
    return int(m.group(1)), m.group(2)


def parse_sysfs_rate(value, what):
    """'200 Gb/sec (4X HDR)' -> 200.0 (Gb/s)."""
    m = re.match(r'^\s*([0-9.]+)\s*Gb/sec', value or '')
    if not m:
        raise ParseError('%s: cannot parse rate %r' % (what, value))
    return float(m.group(1))


@utf8_input('ibstat')
def parse_ibstat(text):
    """Parse `ibstat` output (tab or space indented). Returns {"cas": {name: {...ports}},
    "error": <trailing ibpanic/error line or None>}; ports keyed by number with state,
    physical_state, rate (int Gb/s), link_layer, base_lid, port_guid."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError('ibstat output is empty')
    cas = {}
    ca = port = None
    error = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        m = re.match(r"^CA '([^']+)'$", line)
        if m:
            ca = {'name': m.group(1), 'ports': {}}
            cas[m.group(1)] = ca
            port = None
            continue
        if line.startswith('ibpanic:') or line.startswith('ibwarn:') or line.lower().startswith('error'):
            error = line
            continue
        if ca is None:
            raise ParseError('ibstat line %d: expected "CA \'<name>\'", found %r' % (n, line[:80]))
        m = re.match(r'^Port (\d+):$', line)
        if m:
            port = {}
            ca['ports'][int(m.group(1))] = port
            continue
        m = re.match(r'^([A-Za-z][A-Za-z ]*?):\s*(.*)$', line)
        if not m:
            raise ParseError('ibstat CA %s line %d: cannot parse %r' % (ca['name'], n, line[:80]))
        key = re.sub(r'[^a-z0-9]+', '_', m.group(1).lower()).strip('_')
        val = m.group(2).strip()
        target = port if port is not None else ca
        if key in ('rate', 'number_of_ports', 'base_lid', 'sm_lid', 'lmc'):
            try:
                val = int(val)
            except ValueError:
                raise ParseError('ibstat CA %s %s: not a number: %r' % (ca['name'], m.group(1), val))
        target[key] = val
    for name, c in cas.items():
        want = c.get('number_of_ports')
        if want is not None and want != len(c['ports']):
            raise ParseError('ibstat CA %s: "Number of ports: %d" but %d port sections (truncated?)'
                             % (name, want, len(c['ports'])))
    return {'cas': cas, 'error': error}


@utf8_input('show_gids')
def parse_show_gids(text):
    """Parse MOFED `show_gids`. Returns list of {dev, port, index, gid, ipv4, ver, netdev}."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError('show_gids output is empty')
    out = []
    found = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith('DEV') or line.startswith('---'):
            continue
        m = re.match(r'^n_gids_found=(\d+)$', line)
        if m:
            found = int(m.group(1))
            continue
        f = line.split()
        if len(f) == 6:
            dev, port, idx, gid, ver, ndev = f
            ipv4 = ''
        elif len(f) == 7:
            dev, port, idx, gid, ipv4, ver, ndev = f
        else:
            raise ParseError('show_gids line %d: expected 6 or 7 columns, found %d: %r' % (n, len(f), line[:80]))
        if not re.match(r'^v\d$', ver) or not port.isdigit() or not idx.isdigit():
            raise ParseError('show_gids line %d: cannot parse %r' % (n, line[:80]))
        out.append({'dev': dev, 'port': int(port), 'index': int(idx), 'gid': gid, 'ipv4': ipv4,
                    'ver': ver, 'netdev': ndev})
    if found is not None and found != len(out):
        raise ParseError('show_gids: n_gids_found=%d but %d GID lines parsed' % (found, len(out)))
    return out


@utf8_input('ibdev2netdev')
def parse_ibdev2netdev(text):
    """Parse `ibdev2netdev` (raw or `column -t`, `# comments` stripped).
    Returns a list of {dev, port, netdev, up (bool)}."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError('ibdev2netdev output is empty')
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split('#', 1)[0].strip()
        if not line:
            continue
        m = re.match(r'^(\S+)\s+port\s+(\d+)\s+==>\s+(\S+)\s+\((Up|Down)\)$', line)
        if not m:
            raise ParseError('ibdev2netdev line %d: cannot parse %r' % (n, line[:80]))
        out.append({'dev': m.group(1), 'port': int(m.group(2)), 'netdev': m.group(3),
                    'up': m.group(4) == 'Up'})
    return out


@utf8_input('ibv_devinfo')
def parse_ibv_devinfo_mtu(text, port=1):
    """active_mtu of `port` from `ibv_devinfo -d <dev>` output ('active_mtu: 4096 (5)')."""
    cur = None
    for line in (text or '').splitlines():
        m = re.match(r'^\s*port:\s*(\d+)', line)
        if m:
            cur = int(m.group(1))
            continue
        m = re.match(r'^\s*active_mtu:\s*(\d+)', line)
        if m and (cur == port or cur is None):
            return int(m.group(1))
    raise ParseError('ibv_devinfo: no active_mtu for port %d' % port)


MLNX_QOS_TRUST = ("pcp", "dscp")


def parse_mlnx_qos(text):
    """`mlnx_qos -i <netdev>` -> {'trust': 'pcp'|'dscp', 'pfc': [8 x 0/1], 'dcbx': str or None}.

    Accepts the layouts recorded from MLNX_OFED 4.x to DOCA-OFED 3.2 (tabs or spaces, trailing spaces, with or
    without buffer rows). Fails closed: no trust line, two of them, an unknown trust state, no PFC 'enabled' row
    or one that is not eight 0/1 values under priorities 0-7 is a ParseError naming the field and value."""
    lines = (text or "").splitlines()
    trust = [ln.split(":", 1)[1].strip() for ln in lines if ln.strip().startswith("Priority trust state:")]
    if len(trust) != 1:
        raise ParseError("mlnx_qos: expected one 'Priority trust state:' line, found %d" % len(trust))
    if trust[0] not in MLNX_QOS_TRUST:
        raise ParseError("mlnx_qos: trust state %r is not one of %s" % (trust[0], ", ".join(MLNX_QOS_TRUST)))
    dcbx = [ln.split(":", 1)[1].strip() for ln in lines if ln.strip().startswith("DCBX mode:")]
    try:
        start = [ln.strip() for ln in lines].index("PFC configuration:")
    except ValueError:
        raise ParseError("mlnx_qos: no 'PFC configuration:' section")
    rows = {}
    for ln in lines[start + 1:]:
        words = ln.split()
        if not words or words[0] not in ("priority", "enabled", "buffer"):
            break
        if words[0] in rows:
            raise ParseError("mlnx_qos: PFC row %r appears twice" % words[0])
        rows[words[0]] = words[1:]
    if rows.get("priority") != [str(i) for i in range(8)]:
        raise ParseError("mlnx_qos: PFC priority row %r is not 0-7" % (" ".join(rows.get("priority") or []),))
    enabled = rows.get("enabled")
    if enabled is None or len(enabled) != 8 or any(v not in ("0", "1") for v in enabled):
        raise ParseError("mlnx_qos: PFC enabled row %r is not eight 0/1 values" % (" ".join(enabled or []),))
    return {"trust": trust[0], "pfc": [int(v) for v in enabled], "dcbx": dcbx[0] if len(dcbx) == 1 else None}
