"""Preflight: every rule an inventory must satisfy before anything changes, as one Python function.

`preflight_report(groups, hostvars, settings)` runs every check over the whole inventory (all hosts, not only
the play's, so a --limit run still sees a clash with a host it leaves out) and returns the report lines:
one per problem, "<host(s)>: <variable> ...", identical problems on several hosts merged into one line.
One failing check never hides another: each check adds findings, none raises. roles/preflight calls it
once and fails with every line.

Checks are a registry (CHECKS): adding one is one function `check(ctx)` yielding (host, text) and its test.
A secret's value never appears in a finding: secrets are only tested for presence and emptiness.
"""

import glob
import ipaddress
import os
import re
import sys
from collections.abc import Mapping

import jinja2
from ansible.errors import AnsibleFilterError

# power.py of this directory (rack budgets): importable by name however Ansible loaded this file
if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
from inference import inference_runtime_problems  # noqa: E402  pylint: disable=wrong-import-position
from node_plan import node_plan  # noqa: E402  pylint: disable=wrong-import-position
from power import power_rack_report, power_thermal_profiles  # noqa: E402  pylint: disable=wrong-import-position

_LABEL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", re.I)
_RAIL_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,14}$")
DISTANCES = ("PIX", "PXB", "PHB", "NODE", "SYS")
RAIL_HOST_OFFSET = 11  # filter_plugins/network.py: rail addresses start at .11


class Ctx:
    """What the checks read: the inventory (groups, hostvars) and the role's settings."""

    def __init__(self, groups, hostvars, settings):
        # plain lists, read once: a membership test on Ansible's lazy group lists renders every member again
        self.groups = dict((g, list(members or [])) for g, members in (groups or {}).items())
        self._member_of = {}
        for g, members in self.groups.items():
            if g not in ("all", "ungrouped"):
                for host in members:
                    self._member_of.setdefault(host, []).append(g)
        self.hostvars = hostvars
        self.s = settings
        self.all = list(self.groups.get("all") or [])
        self.gpu = list(self.groups.get(settings.get("gpu_group", "gpu_nodes")) or [])
        self.profiles = settings.get("profiles") or {}
        self._cache = {}
        self._hosts = {}
        self._names = {}
        self.counts = {}
        self.plans = None  # {host: (node plan, error)}, computed once by _plans

    def _vars(self, host):
        """The host's variables, read once: Ansible computes a host's whole variable set on each hostvars[h]."""
        if host not in self._hosts:
            try:
                self._hosts[host] = self.hostvars[host]
            except Exception:  # noqa: BLE001 - a host whose variables cannot be read has none here
                self._hosts[host] = {}
        return self._hosts[host]

    def var(self, host, name, default=None):
        """A host's variable, default when unset, as plain dicts, lists and scalars: Ansible templates a value
        on access and the items of a list or mapping only when they are read, so the whole value is read here
        and anything that cannot be evaluated (a variable it names undefined, a vaulted one among them) is a
        finding naming the host and the variable, never a check that cannot run."""
        key = (host, name)
        if key not in self._cache:
            try:
                hv = self._vars(host)
                self._cache[key] = (_plain(hv[name]), None) if name in hv else (default, None)
            except Exception as e:  # noqa: BLE001 - a variable that cannot be evaluated is a finding
                self._cache[key] = (default, "%s cannot be evaluated: %s" % (name, _reason(e)))
        return self._cache[key][0]

    def has(self, host, name):
        """Whether the host sets the variable (the names are read once per host: the role-argument check asks
        for every option of every role on every host)."""
        if host not in self._names:
            try:
                self._names[host] = frozenset(self._vars(host).keys())
            except Exception:  # noqa: BLE001 - a host whose variables cannot be listed sets none here
                self._names[host] = frozenset()
        return name in self._names[host]

    def failed(self, host, name):
        """Whether reading the variable failed (its finding is reported once, by errors())."""
        self.var(host, name)
        return self._cache[(host, name)][1] is not None

    def errors(self):
        return [(h, err) for (h, _n), (_v, err) in sorted(self._cache.items()) if err]


def _reason(error):
    """An error's first line, without the exception class ansible-core puts in front of a templating error."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text[:200]


def _is_seq(value):
    """A list as Ansible hands it over (a list, or a lazy tuple of a templated value)."""
    return isinstance(value, (list, tuple))


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _network(value):
    if not isinstance(value, str):
        return None
    try:
        return ipaddress.ip_network(value, strict=True) if "/" in value else None
    except ValueError:
        return None


def _address(value):
    try:
        return ipaddress.ip_address(str(value)) if isinstance(value, str) else None
    except ValueError:
        return None


def _capacity(net):
    last = net.num_addresses - 2 if net.version == 4 and net.prefixlen < 31 else net.num_addresses - 1
    return max(last - RAIL_HOST_OFFSET + 1, 0)


# ---------------------------------------------------------------------------------------------- checks

def check_controller(ctx):
    s = ctx.s
    for what, have, want, var in (("ansible-core", s.get("ansible_version"), s.get("supported_ansible_min"),
                                   "preflight_supported_ansible_min"),
                                  ("Python", s.get("python_version"), s.get("supported_python_min"),
                                   "preflight_supported_python_min")):
        try:
            older = _version(have) < _version(want)
        except ValueError:
            yield "controller", "%s version %r or %s %r is not a version" % (what, have, var, want)
            continue
        if older:
            extra = " (%s)" % s["python"] if what == "Python" and s.get("python") else ""
            yield "controller", "%s %s%s is older than %s %s" % (what, have, extra, var, want)


def _version(text):
    parts = re.findall(r"\d+", str(text or ""))
    if not parts:
        raise ValueError(text)
    return tuple(int(p) for p in parts[:3])


def check_host_names(ctx):
    for host in ctx.all:
        if _address(host):
            continue
        labels = host.split(".")
        if len(host) > 253 or not all(_LABEL_RE.match(label) for label in labels) or not host.isascii():
            yield host, ("inventory_hostname %r is not a host name of ASCII letters, digits and inner hyphens "
                         "(RFC 1123 labels of 1-63 characters)" % host)
    short = {}
    for host in ctx.all:
        if not _address(host):
            short.setdefault(host.lower().split(".")[0], []).append(host)
    for name, holders in sorted(short.items()):
        if len(holders) > 1:
            yield ", ".join(holders), ("inventory_hostname: short name '%s' is used by %d hosts (names are compared "
                                       "without case and domain)" % (name, len(holders)))


def check_addresses(ctx):
    mgmt_var = ctx.s.get("mgmt_subnet_var", "mgmt_subnet")
    used = {}
    for host in ctx.all:
        if not ctx.has(host, "ansible_host"):
            yield host, "ansible_host is not set (every host needs its management address)"
            continue
        addr = ctx.var(host, "ansible_host")
        ip = _address(addr)
        if ip is None:
            yield host, "ansible_host '%s' is not an IP address" % (addr,)
        else:
            used.setdefault(str(ip), []).append(host)
        raw = ctx.var(host, mgmt_var, "")
        net = _network(raw)
        if raw in (None, ""):
            yield host, "%s is not set" % mgmt_var
        elif net is None:
            yield host, ("%s '%s' is not a valid subnet (expected a network address and prefix length, "
                         "e.g. 198.18.0.0/24)" % (mgmt_var, raw))
        elif ip is not None and (ip not in net or (net.num_addresses > 2 and ip in (net.network_address,
                                                                                   net.broadcast_address))):
            yield host, "ansible_host %s is outside %s %s" % (ip, mgmt_var, net)
    for addr, holders in sorted(used.items()):
        if len(holders) > 1:
            yield ", ".join(holders), "ansible_host %s is used by %d hosts" % (addr, len(holders))


def check_gpu_nodes(ctx):
    group = ctx.s.get("gpu_group", "gpu_nodes")
    prefix = ctx.s.get("rack_prefix", "rack_")
    if not ctx.gpu:
        yield "inventory", "group %s is missing or empty (preflight_gpu_group)" % group
    if not ctx.profiles:
        yield group, ("hardware_profiles is empty or not loaded (the play loads playbooks/vars/hardware_profiles.yml"
                      " through vars_files)")
    indexes = {}
    for host in ctx.gpu:
        if not ctx.has(host, "node_index"):
            yield host, "node_index is not set (every host in %s needs one)" % group
        else:
            index = ctx.var(host, "node_index")
            if not _is_int(index) or index < 0:
                yield host, "node_index '%s' is not an integer of 0 or more%s" % (
                    index, " (a string: write it without quotes)"
                    if isinstance(index, str) and index.isdigit() else "")
            else:
                indexes.setdefault(index, []).append(host)
        if ctx.profiles:
            name = ctx.var(host, "hardware_profile")
            if name is None or not isinstance(name, str) or name not in ctx.profiles:
                yield host, "%s (known: %s)" % (
                    "hardware_profile is not set" if name is None else "hardware_profile '%s' is not a known profile"
                    % (name,), ", ".join(sorted(ctx.profiles)))
        racks = sorted(g for g in _group_names(ctx, host) if g.startswith(prefix))
        if len(racks) != 1:
            yield host, ("group_names: %s; every host in %s belongs to exactly one %s* child group"
                         % ("in no rack group" if not racks else "in %d rack groups (%s)" % (len(racks), ", ".join(racks)),
                            group, prefix))
    for index, holders in sorted(indexes.items()):
        if len(holders) > 1:
            yield ", ".join(holders), "node_index %d is used by %d GPU nodes" % (index, len(holders))
    for host in ctx.all:
        if host in ctx.gpu:
            continue
        racks = sorted(g for g in _group_names(ctx, host) if g.startswith(prefix))
        if racks:
            yield host, "group_names: in rack group %s but not in %s" % (", ".join(racks), group)


def _group_names(ctx, host):
    return list(ctx._member_of.get(host, ()))


def check_rails(ctx):
    if not ctx.gpu:
        return
    var = ctx.s.get("rails_var", "rdma_rails")
    group = ctx.s.get("gpu_group", "gpu_nodes")
    first = ctx.gpu[0]
    rails = ctx.var(first, var, [])
    for host in ctx.gpu[1:]:
        if _plain(ctx.var(host, var, [])) != _plain(rails):
            yield host, ("%s differs from the one %s has (rails are cluster-wide: set them once, in group_vars)"
                         % (var, first))
    if not _is_seq(rails) or not rails:
        yield group, "%s is not set or is not a list of rails (name, subnet, mtu)" % var
        return
    lo, hi = int(ctx.s.get("mtu_min", 1280)), int(ctx.s.get("mtu_max", 9216))
    mgmt_var = ctx.s.get("mgmt_subnet_var", "mgmt_subnet")
    mgmt = _network(ctx.var(first, mgmt_var, ""))
    nets, names = [], {}
    for i, rail in enumerate(rails):
        rail = rail if isinstance(rail, Mapping) else {}
        name = rail.get("name")
        label = "%s[%d] (%s)" % (var, i, name if name is not None else "?")
        if not isinstance(name, str) or not _RAIL_NAME_RE.match(name):
            yield group, ("%s: name %r is not a rail name (a lower-case letter, then letters, digits, - or _; "
                          "at most 15 characters, as a netdev name)" % (label, name))
        else:
            names.setdefault(name, []).append(i)
        net = _network(rail.get("subnet"))
        if net is None:
            yield group, ("%s: subnet '%s' is not a valid subnet (expected a network address and prefix length, "
                          "e.g. 198.18.1.0/24)" % (label, rail.get("subnet", "")))
        else:
            nets.append((i, name, net))
            if mgmt is not None and mgmt.version == net.version and net.overlaps(mgmt):
                yield group, "%s: subnet %s overlaps %s %s" % (label, net, mgmt_var, mgmt)
            room = _capacity(net)
            if room < len(ctx.gpu):
                yield group, "%s: subnet %s has room for %d GPU nodes, %s has %d" % (label, net, room, group,
                                                                                    len(ctx.gpu))
            else:
                for host in ctx.gpu:
                    index = ctx.var(host, "node_index")
                    if _is_int(index) and index >= room:
                        yield host, ("node_index %d does not fit %s (%s) subnet %s (room for node_index 0-%d)"
                                     % (index, var, name, net, room - 1))
        mtu = rail.get("mtu", "")
        if not _is_int(mtu) or not lo <= mtu <= hi:
            yield group, "%s: mtu '%s' is outside %d-%d" % (label, mtu, lo, hi)
    for name, where in sorted(names.items()):
        if len(where) > 1:
            yield group, "%s: rail name '%s' is used by %s" % (var, name, ", ".join("%s[%d]" % (var, i) for i in where))
    for a in range(len(nets)):
        for b in range(a + 1, len(nets)):
            (ia, na, neta), (ib, nb, netb) = nets[a], nets[b]
            if neta.version == netb.version and neta.overlaps(netb):
                yield group, "%s[%d] (%s): subnet %s overlaps %s[%d] (%s) subnet %s" % (
                    var, ia, na, neta, var, ib, nb, netb)


def check_secrets(ctx):
    """Required secrets: set and not empty on every host, and never plain text in an inventory file."""
    default = list(ctx.s.get("required_secrets") or [])
    wanted_all = set(default)
    for host in ctx.all:
        wanted = ctx.var(host, "preflight_required_secrets", default)
        wanted = wanted if _is_seq(wanted) else default
        wanted_all.update(w for w in wanted if isinstance(w, str))
        for name in wanted:
            if not ctx.has(host, name):
                yield host, ("secret %s is not defined (supply it from Ansible Vault or an AWX credential)" % name)
                continue
            value = ctx.var(host, name)
            if value is None or not str(value).strip():
                yield host, "secret %s is empty" % name
    for path, name in plain_text_secrets(ctx.s.get("inventory_sources") or [], sorted(wanted_all)):
        yield "inventory", ("secret %s is plain text in %s (encrypt it with ansible-vault encrypt_string, or pass it "
                            "as an extra var or AWX credential)" % (name, path))


def plain_text_secrets(sources, names):
    """(file, variable) for every inventory file that gives a secret a plain string: not !vault, not a
    whole-file vault, not a template that reads it from elsewhere."""
    import yaml  # pylint: disable=import-outside-toplevel

    # libyaml's loader where PyYAML has it: a 1,000-host inventory file parses in a tenth of the time.
    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # pylint: disable=too-many-ancestors
        pass

    Loader.add_constructor("!vault", lambda loader, node: _Vaulted())
    Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))
    found = []
    for path in _inventory_files(sources):
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except OSError:
            continue
        if raw.lstrip().startswith(b"$ANSIBLE_VAULT"):
            continue
        try:
            doc = yaml.load(raw.decode("utf-8", "replace"), Loader=Loader)  # noqa: S506 - SafeLoader subclass
        except yaml.YAMLError:
            continue  # not YAML (an ini inventory): Ansible's own parser judges it
        for name in _plain_keys(doc, set(names)):
            found.append((path, name))
    return sorted(set(found))


class _Vaulted:
    pass


def _plain_keys(node, names):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in names and isinstance(value, (str, int, float)) and not isinstance(value, bool) \
                    and "{{" not in str(value) and str(value).strip():
                yield key
            else:
                for inner in _plain_keys(value, names):
                    yield inner
    elif isinstance(node, list):
        for item in node:
            for inner in _plain_keys(item, names):
                yield inner


def _inventory_files(sources):
    out = []
    for source in sources if _is_seq(sources) else [sources]:
        if not isinstance(source, str) or not os.path.exists(source):
            continue
        base = source if os.path.isdir(source) else os.path.dirname(source)
        if os.path.isfile(source):
            out.append(source)
        else:
            out += [p for p in glob.glob(os.path.join(source, "*")) if os.path.isfile(p)]
        for sub in ("group_vars", "host_vars"):
            for root, _dirs, files in os.walk(os.path.join(base, sub)):
                out += [os.path.join(root, f) for f in files]
    return sorted(set(p for p in out if p.endswith((".yml", ".yaml", ".json")) or "." not in os.path.basename(p)))


def check_profiles(ctx):
    """Every profile of the catalogue (the shipped one and hardware_profiles_extra) follows the schema."""
    for name, profile in sorted(ctx.profiles.items()):
        for problem in profile_problems(profile):
            yield "hardware_profiles", "profile %s: %s" % (name, problem)


def profile_problems(p):
    if not isinstance(p, Mapping):
        return ["is %r, not a mapping" % (p,)]
    out = []

    def need(key, ok, what):
        if key not in p:
            out.append("%s is missing (%s)" % (key, what))
        elif not ok(p[key]):
            out.append("%s=%r is not %s" % (key, p[key], what))

    def pos_int(v):
        return _is_int(v) and v > 0

    def sub(key, fields, what):
        v = p.get(key)
        return isinstance(v, Mapping) and all(f in v and check(v[f]) for f, check in fields)

    need("gpu_name", lambda v: isinstance(v, str) and v.strip(), "a product name")
    need("gpu_count", pos_int, "a positive integer")
    need("nvswitch", lambda v: isinstance(v, bool), "true or false")
    need("nvlink", lambda v: sub("nvlink", [("link_code", lambda c: c is None or re.match(r"^NV\d+$", str(c))),
                                            ("links_per_gpu", lambda n: _is_int(n) and n >= 0)], ""),
         "{link_code: NV<n> or null, links_per_gpu: integer}")
    need("nic_count", lambda v: _is_int(v) and v >= 0, "an integer of 0 or more")
    need("nic_max_distance", lambda v: v in DISTANCES, "one of %s" % ", ".join(DISTANCES))
    need("pcie", lambda v: sub("pcie", [("gen", lambda g: _is_int(g) and 1 <= g <= 6),
                                        ("width", lambda w: w in (1, 2, 4, 8, 16, 32))], ""),
         "{gen: 1-6, width: 1, 2, 4, 8, 16 or 32}")
    need("power_watts", lambda v: sub("power_watts", [("min", pos_int), ("max", pos_int), ("default", pos_int)], "")
         and v["min"] <= v["default"] <= v["max"], "{min, default, max}: positive integers, min <= default <= max")
    need("temperature_c", lambda v: sub("temperature_c", [("slowdown", _is_int), ("alert", _is_int)], "")
         and 0 < v["alert"] < v["slowdown"] <= 150, "{slowdown, alert}: integers, 0 < alert < slowdown <= 150")
    need("non_gpu_watts", lambda v: _is_int(v) and v >= 0,
         "the watts the node draws besides its GPUs at its maximum: an integer of 0 or more")
    if "memory_repairs_reported" in p and not isinstance(p["memory_repairs_reported"], bool):
        out.append("memory_repairs_reported=%r is not true or false" % (p["memory_repairs_reported"],))
    if "driver_kernel_modules" in p and p["driver_kernel_modules"] not in ("open", "proprietary"):
        out.append("driver_kernel_modules=%r is not open or proprietary" % (p["driver_kernel_modules"],))
    extras = p.get("driver_extras", [])
    if not isinstance(extras, list) or any(e not in DRIVER_EXTRAS for e in extras):
        out.append("driver_extras=%r is not a list of %s" % (extras, ", ".join(DRIVER_EXTRAS)))
    known = {"description", "gpu_name", "gpu_count", "nvswitch", "nvlink", "nic_count", "nic_max_distance", "pcie",
             "power_watts", "non_gpu_watts", "temperature_c", "memory_repairs_reported", "acceptance_model",
             "driver_kernel_modules", "driver_extras"}
    for key in sorted(set(p) - known):
        out.append("%s is not a profile key (known: %s)" % (key, ", ".join(sorted(known))))
    return out


# nvidia_driver_extras values (filter_plugins/nvidia_packages.py EXTRAS)
DRIVER_EXTRAS = ("fabricmanager", "nscq", "nvsdm", "nvlsm", "imex")


def check_power(ctx):
    """Rack budgets (power_rack_report): the node caps of a rack add up to no more than its budget."""
    prefix = ctx.s.get("rack_prefix", "rack_")
    racks = dict((g, m) for g, m in ctx.groups.items() if g.startswith(prefix))
    view = dict((h, {k: ctx.var(h, k) for k in ("bmc_power_node_cap_watts", "rack_power_budget_watts")
                     if ctx.has(h, k)}) for h in ctx.all)
    try:
        for rack in power_rack_report(racks, view):
            if rack["over"]:
                yield rack["rack"], rack["text"].split(": ", 1)[1]
    except AnsibleFilterError as e:
        yield "racks", str(e)


_PLAN_INPUTS = {"gpu_power_limit_watts": 0, "gpu_power_node_budget_watts": 0, "gpu_power_limits_watts": {},
                "bmc_power_node_cap_watts": 0, "rack_power_budget_watts": 0, "bmc_power_gpu_temperature_c": {}}
_PLAN_NUMBERS = ("gpu_power_limit_watts", "gpu_power_node_budget_watts", "bmc_power_node_cap_watts",
                 "rack_power_budget_watts")


def _as_int(value):
    """value as the plan reads it (power.py's _int): an int, or a string of one; None for anything else."""
    if _is_int(value):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _plans(ctx):
    """{host: (plan, error)} of every GPU node whose plan can be computed (filter_plugins/node_plan.py), as every
    play computes it; computed once per run. A node with a broken profile, or a power input that is not a number
    or a mapping (the role argument specs report those), has no entry."""
    if ctx.plans is not None:
        return ctx.plans
    ctx.plans = {}
    prefix = ctx.s.get("rack_prefix", "rack_")
    for host in ctx.gpu:
        name = ctx.var(host, "hardware_profile")
        if not isinstance(name, str) or name not in ctx.profiles:
            continue
        inputs = dict((k, ctx.var(host, k) if ctx.has(host, k) else v) for k, v in _PLAN_INPUTS.items())
        inputs.update((k, _as_int(inputs[k])) for k in _PLAN_NUMBERS)
        if any(inputs[k] is None for k in _PLAN_NUMBERS) or not isinstance(inputs["gpu_power_limits_watts"], Mapping):
            continue
        try:
            ctx.plans[host] = (node_plan(ctx.profiles, host, name, _group_names(ctx, host), rack_prefix=prefix,
                                         gpu_power_limit_watts=inputs["gpu_power_limit_watts"],
                                         gpu_power_node_budget_watts=inputs["gpu_power_node_budget_watts"],
                                         gpu_power_limits_watts=inputs["gpu_power_limits_watts"],
                                         node_cap_watts=inputs["bmc_power_node_cap_watts"],
                                         rack_budget_watts=inputs["rack_power_budget_watts"], groups=ctx.groups,
                                         thermal_overrides=inputs["bmc_power_gpu_temperature_c"]), None)
        except AnsibleFilterError as e:
            text = str(e).split(": ", 1)[1] if str(e).startswith("node_plan: ") else str(e)
            ctx.plans[host] = (None, text[len(host) + 2:] if text.startswith(host + ": ") else text)
    return ctx.plans


def check_node_plans(ctx):
    """The node plan of every GPU node (filter_plugins/node_plan.py), computed from its inventory as every
    play computes it: per-GPU power limits within the profile's range and the node budget above the GPUs'
    minimum, caps and thermal overrides the plan can use. Nodes with a broken profile, index or rails are
    reported by the checks above and skipped here."""
    for host, (_plan, error) in _plans(ctx).items():
        if error:
            yield host, error


def check_node_caps(ctx):
    """Every node cap the run would write (bmc_power_node_cap_watts, or the node's even share of its rack's
    rack_power_budget_watts) covers the node's GPUs at the limits its plan sets plus the profile's non_gpu_watts:
    a BMC holding a cap below that throttles the node under the GPU limits the same run sets. One line names the
    rack, the node(s), the cap and where it comes from, and the floor and how it adds up."""
    for host, (plan, _error) in _plans(ctx).items():
        if plan is None:
            continue
        power = plan["power"]
        explicit = _as_int(ctx.var(host, "bmc_power_node_cap_watts", 0)) or 0
        if explicit < 0:
            yield host, ("bmc_power_node_cap_watts=%d is not 0 (the rack budget's even share, or no cap) or a positive "
                         "number of watts" % explicit)
        if explicit > 0:
            cap, source = explicit, "bmc_power_node_cap_watts=%d" % explicit
        elif power.get("rack_share_watts") is not None:
            members = len(ctx.groups.get(plan["rack"]) or [host])
            cap = power["rack_share_watts"]
            source = "rack_power_budget_watts=%s shared by %d node%s" % (
                _as_int(ctx.var(host, "rack_power_budget_watts")), members, "s" if members > 1 else "")
        else:
            continue
        floor = power.get("node_min_cap_watts")
        if floor is None or cap >= floor:
            continue  # a profile without non_gpu_watts: check_profiles reports it
        limits = power["gpu_limits_watts"]
        gpus = ("%d GPUs x %d W" % (len(limits), power["gpu_limit_watts"]) if power["gpu_limit_watts"] is not None
                else "GPU limits adding up to %d W" % sum(limits.values()))
        yield host, ("%s: node cap %d W (%s) is below the node's floor of %d W (%s + non_gpu_watts %d W of %s)"
                     % (plan["rack"] or "no rack", cap, source, floor, gpus, power["non_gpu_watts"],
                        plan["profile_name"]))


def check_thermal_overrides(ctx):
    """bmc_power_gpu_temperature_c, on every host that sets it (Prometheus alerts with it, bmc_power publishes it):
    known profiles only, each alert below its slowdown, no slowdown raised above the profile's own
    (power_thermal_profiles, the function bmc_power and the node plan use)."""
    for host in ctx.all:
        if not ctx.has(host, "bmc_power_gpu_temperature_c"):
            continue
        try:
            power_thermal_profiles(ctx.profiles, ctx.var(host, "bmc_power_gpu_temperature_c"))
        except AnsibleFilterError as e:
            yield host, str(e)


_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", re.I)


def _bmc_address(value):
    """The BMC address as compared for uniqueness (an IP address's canonical text, a DNS name in lower case
    without a trailing dot), or None when it is neither an IP address nor a DNS name."""
    if not isinstance(value, str):
        return None
    ip = _address(value)
    if ip is not None:
        return str(ip)
    name = value[:-1] if value.endswith(".") else value
    labels = name.split(".")
    if not name or len(name) > 253 or not name.isascii() or not all(_DNS_LABEL_RE.match(x) for x in labels):
        return None
    if labels[-1].isdigit():
        return None  # 198.18.8.312: a mistyped IPv4 address, never a name (a top-level label is not all digits)
    return name.lower()


def check_bmc(ctx):
    """BMC addresses: each bmc_power_address an IP address or a DNS name, no two hosts with the same BMC, and
    every GPU node the run would cap (its plan has a node_cap_watts) has a BMC address to set the cap through."""
    used = {}
    for host in ctx.all:
        value = ctx.var(host, "bmc_power_address", "")
        if value in (None, ""):
            continue
        key = _bmc_address(value)
        if key is None:
            yield host, ("bmc_power_address %r is neither an IP address nor a DNS name (RFC 1123 labels of letters, "
                         "digits and inner hyphens; a name never ends in an all-digit label)" % (value,))
        else:
            used.setdefault(key, []).append(host)
    for key, holders in sorted(used.items()):
        if len(holders) > 1:
            yield ", ".join(holders), "bmc_power_address %s is used by %d hosts (one BMC per node)" % (
                key, len(holders))
    for host, (plan, _error) in _plans(ctx).items():
        cap = plan["power"]["node_cap_watts"] if plan else None
        if cap is not None and ctx.var(host, "bmc_power_address", "") in (None, ""):
            yield host, ("%s: gets a node cap of %d W (from %s) but bmc_power_address is not set: no BMC to set it "
                         "through" % (plan["rack"] or "no rack", cap, plan["power"]["node_cap_source"]))


def _yaml_file(path):
    """A role file as data, read once per controller process; {} when absent."""
    import yaml  # pylint: disable=import-outside-toplevel
    if path not in _YAML_FILES:
        try:
            with open(path) as handle:
                _YAML_FILES[path] = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
        except OSError:
            _YAML_FILES[path] = {}
    return _YAML_FILES[path]


_YAML_FILES = {}


def _role_yaml(ctx, role, name):
    """roles/<role>/<name>/main.yml as data."""
    return _yaml_file(os.path.join(ctx.s.get("roles_dir") or "", role, name, "main.yml"))


def check_inference_settings(ctx):
    """The inference_runtime rules an argument spec cannot say (batch size 16-256, batch timeout, tensor
    parallel size dividing the profile's GPU count, engine names, model checksums...), on what each GPU node's
    inventory sets: the same function the role asserts with (filter_plugins/inference.py)."""
    engines = _role_yaml(ctx, "inference_runtime", "vars").get("_inference_runtime_engines") or []
    defaults = _role_yaml(ctx, "inference_runtime", "defaults")
    partners = ("inference_runtime_max_batch_size", "inference_runtime_max_tokens_per_batch")
    names = [k for k in defaults if k.startswith("inference_runtime_")]
    for host in ctx.gpu:
        values = dict((k, ctx.var(host, k)) for k in names if ctx.has(host, k))
        if not values:
            continue
        for k in partners:
            if k not in values and k in defaults and any(p in values for p in partners):
                values[k] = defaults[k]
        name = ctx.var(host, "hardware_profile")
        profile = ctx.profiles.get(name) if isinstance(name, str) else None
        gpus = profile.get("gpu_count") if isinstance(profile, Mapping) else None
        for problem in inference_runtime_problems(values, engines, gpus, name):
            yield host, problem


def check_role_arguments(ctx):
    """Every role's argument spec, for every variable an inventory host sets: a bad type, choice or range
    stops the run here, before the baseline, with the host, variable and value in one line."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator  # pylint: disable=import-outside-toplevel
    specs = ctx.s.get("role_specs")
    if specs is None:
        specs = role_specs(ctx.s.get("roles_dir"))
    for role, spec in sorted(specs.items()):
        for host in ctx.all:
            params = dict((k, ctx.var(host, k)) for k in spec if ctx.has(host, k) and not ctx.failed(host, k))
            if not params:
                continue
            ctx.counts["role_values"] = ctx.counts.get("role_values", 0) + len(params)
            wanted = dict((k, _optional(spec[k])) for k in params)
            result = ArgumentSpecValidator(wanted).validate(params)
            for err in result.errors:
                yield host, _spec_message(role, err, params, spec)


def _plain(value):
    """Plain dicts, lists and scalars. The validator deep-copies its input, and a deep copy of ansible-core's
    lazily templated containers costs seconds per role on a real inventory. An undefined value anywhere in it
    (ansible-core hands over a marker for a variable a template names but nothing defines, a vaulted one the
    run was not given) raises its own error here, naming the variable."""
    if isinstance(value, jinja2.Undefined):
        str(value)  # raises the undefined error with its message
        raise AnsibleFilterError("an undefined value")
    if isinstance(value, Mapping):
        return dict((k if isinstance(k, (int, float, bool)) or k is None else str(k), _plain(v))
                    for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def role_specs(roles_dir):
    """{role: options of its main entry point} for every roles/*/meta/argument_specs.yml (read once)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(roles_dir or "", "*", "meta", "argument_specs.yml"))):
        doc = _yaml_file(path)
        options = ((doc.get("argument_specs") or {}).get("main") or {}).get("options") or {}
        out[os.path.basename(os.path.dirname(os.path.dirname(path)))] = options
    return out


def _optional(option, top=True):
    """An option as the validator needs it: no description; at the top level not required and without
    default either, since a role's defaults supply what the inventory leaves out."""
    option = dict(option)
    for key in ("description", "version_added") + (("required", "default") if top else ()):
        option.pop(key, None)
    if isinstance(option.get("options"), dict):
        option["options"] = dict((k, _optional(v, top=False)) for k, v in option["options"].items())
    return option


def _spec_message(role, err, params, spec):
    text = str(err).splitlines()[0].split(". Valid ")[0]
    names = [k for k in params if k in text] or sorted(params)
    name = max(names, key=len)
    if spec.get(name, {}).get("no_log"):
        return "%s does not match roles/%s/meta/argument_specs.yml (%s; value hidden)" % (
            name, role, spec[name].get("type", "str"))
    return "%s=%s does not match roles/%s/meta/argument_specs.yml: %s" % (name, _short(params.get(name)), role, text)


def _short(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


CHECKS = [check_controller, check_host_names, check_addresses, check_gpu_nodes, check_rails, check_secrets,
          check_profiles, check_power, check_node_plans, check_node_caps, check_thermal_overrides, check_bmc,
          check_inference_settings, check_role_arguments]


def _rack_count(ctx):
    return len([g for g in ctx.groups if g.startswith(ctx.s.get("rack_prefix", "rack_"))])


def _rail_count(ctx):
    rails = ctx.var(ctx.gpu[0], ctx.s.get("rails_var", "rdma_rails"), []) if ctx.gpu else []
    return len(rails) if _is_seq(rails) else 0


# What each check family read, for the one line per family a passing preflight prints (a check without an
# entry is named after its function).
CHECKED = {
    check_controller: lambda ctx: "controller: ansible-core %s, Python %s" % (
        ctx.s.get("ansible_version"), ctx.s.get("python_version")),
    check_host_names: lambda ctx: "host names: %d hosts" % len(ctx.all),
    check_addresses: lambda ctx: "management addresses: %d hosts" % len(ctx.all),
    check_gpu_nodes: lambda ctx: "GPU nodes: %d, each with a node_index, a known hardware_profile and one rack of %d"
    % (len(ctx.gpu), _rack_count(ctx)),
    check_rails: lambda ctx: "RoCE rails: %d rails for %d GPU nodes" % (_rail_count(ctx), len(ctx.gpu)),
    check_secrets: lambda ctx: "secrets: %d required on %d hosts, none in plain text in the inventory" % (
        len(ctx.s.get("required_secrets") or []), len(ctx.all)),
    check_profiles: lambda ctx: "hardware profiles: %d in the catalogue" % len(ctx.profiles),
    check_power: lambda ctx: "rack power budgets: %d racks" % _rack_count(ctx),
    check_node_plans: lambda ctx: "node plans: %d GPU nodes (power limits, caps, thermal thresholds)" % len(ctx.gpu),
    check_node_caps: lambda ctx: "node caps: %d GPU nodes capped, each at or above its GPUs' limits plus its "
    "non-GPU draw" % sum(1 for plan, _ in _plans(ctx).values() if plan and plan["power"]["node_cap_watts"]),
    check_thermal_overrides: lambda ctx: "thermal overrides: %d hosts set bmc_power_gpu_temperature_c" % sum(
        1 for host in ctx.all if ctx.has(host, "bmc_power_gpu_temperature_c")),
    check_bmc: lambda ctx: "BMC addresses: %d hosts, valid and unique" % sum(
        1 for host in ctx.all if ctx.var(host, "bmc_power_address", "") not in (None, "")),
    check_inference_settings: lambda ctx: "inference settings: %d GPU nodes" % len(ctx.gpu),
    check_role_arguments: lambda ctx: "role arguments: %d inventory values against %d roles' argument specs" % (
        ctx.counts.get("role_values", 0), len(ctx.s.get("role_specs") or role_specs(ctx.s.get("roles_dir")))),
}


def _run(groups, hostvars, settings):
    """(findings [(host, text)], checked [line per check family]) of every check over the inventory."""
    ctx = Ctx(groups, hostvars, settings or {})
    findings, checked = [], []
    for check in CHECKS:
        try:
            found = list(check(ctx))
        except Exception as e:  # noqa: BLE001 - a check that breaks is a finding, never a traceback
            found = [("preflight", "check %s could not run: %s: %s" % (check.__name__, type(e).__name__, e))]
        findings.extend(found)
        try:
            line = CHECKED[check](ctx) if check in CHECKED else check.__name__[len("check_"):].replace("_", " ")
        except Exception as e:  # noqa: BLE001 - a count that cannot be made is named, never a traceback
            line = "%s (%s)" % (check.__name__, type(e).__name__)
        checked.append("%s%s" % (line, ": %d problem(s)" % len(found) if found else ""))
    findings.extend(ctx.errors())
    return findings, checked


def preflight_findings(groups, hostvars, settings):
    """[(host, text)] of every check over the inventory."""
    return _run(groups, hostvars, settings)[0]


def preflight_results(groups, hostvars, settings):
    """{'problems': report lines (preflight_report), 'checked': one line per check family, what it read}, from
    one pass over the inventory."""
    findings, checked = _run(groups, hostvars, settings)
    return {"problems": _report_lines(findings, settings), "checked": checked}


def preflight_report(groups, hostvars, settings):
    """Report lines: one per distinct problem, naming its hosts ("a, b and 3 more: text"), sorted."""
    return _report_lines(preflight_findings(groups, hostvars, settings), settings)


def _report_lines(findings, settings):
    max_hosts = int((settings or {}).get("report_max_hosts", 6))
    by_text = {}
    for host, text in findings:
        hosts = by_text.setdefault(text, [])
        if host not in hosts:
            hosts.append(host)
    lines = []
    for text, hosts in by_text.items():
        who = ", ".join(hosts[:max_hosts]) + (" and %d more" % (len(hosts) - max_hosts) if len(hosts) > max_hosts
                                              else "")
        lines.append("%s: %s" % (who, text))
    return sorted(lines)


class FilterModule:
    def filters(self):
        return {"preflight_report": preflight_report, "preflight_results": preflight_results}
