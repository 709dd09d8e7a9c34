"""Power and cooling arithmetic: per-GPU limits from a limit, a per-GPU map or a node budget; node caps
from a rack budget; rack totals against their budgets; per-profile GPU temperature thresholds.

Every error names the variable and the host (or rack) so it can be shown before anything changes.
"""

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def _int(value, name, who):
    if isinstance(value, bool):
        raise AnsibleFilterError("%s: %s=%r is not a number of watts" % (who, name, value))
    try:
        return int(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError("%s: %s=%r is not a number of watts" % (who, name, value))


def _number(value):
    """value as a float when it is a number (not a bool), else None."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _range(profile, who):
    try:
        watts = profile["power_watts"]
        return int(profile["gpu_count"]), int(watts["min"]), int(watts["max"]), int(watts["default"])
    except (KeyError, TypeError, ValueError):
        raise AnsibleFilterError("%s: the hardware profile has no gpu_count and power_watts {min, max, default}"
                                 % who)


def power_gpu_limits(profile, limit_watts=0, node_budget_watts=0, per_gpu=None, host="",
                     profile_name="the profile"):
    """Per-GPU power limits {index: watts} for a node.

    per_gpu (gpu_power_limits_watts) fixes some GPUs; the rest get limit_watts (gpu_power_limit_watts), or
    their share of node_budget_watts (gpu_power_node_budget_watts) minus the fixed ones, floored and
    clamped to the GPUs' maximum, or the profile's default. A value outside min..max, or a budget below
    the GPUs' minimum sum, fails naming the variable and the host.
    """
    who = host or "host"
    count, wmin, wmax, wdefault = _range(profile, who)
    limit = _int(limit_watts or 0, "gpu_power_limit_watts", who)
    budget = _int(node_budget_watts or 0, "gpu_power_node_budget_watts", who)
    if limit and budget:
        raise AnsibleFilterError("%s: set gpu_power_limit_watts or gpu_power_node_budget_watts, not both" % who)
    fixed = {}
    for key, value in (per_gpu or {}).items():
        try:
            index = int(str(key).upper().replace("GPU", ""))
        except ValueError:
            raise AnsibleFilterError("%s: gpu_power_limits_watts key %r is not a GPU index" % (who, key))
        if not 0 <= index < count:
            raise AnsibleFilterError("%s: gpu_power_limits_watts names GPU %d but %s has GPUs 0-%d"
                                     % (who, index, profile_name, count - 1))
        fixed[index] = (_int(value, "gpu_power_limits_watts[%d]" % index, who),
                        "gpu_power_limits_watts[%d]" % index)
    rest = [i for i in range(count) if i not in fixed]
    out = {}
    if budget:
        fixed_sum = sum(w for w, _ in fixed.values())
        floor = fixed_sum + wmin * len(rest)
        if budget < floor:
            raise AnsibleFilterError(
                "%s: gpu_power_node_budget_watts=%d is below the GPUs' minimum sum of %d W (%s%d x %d W of %s)"
                % (who, budget, floor, ("%d W fixed + " % fixed_sum) if fixed else "", len(rest), wmin,
                   profile_name))
        each = min(wmax, (budget - fixed_sum) // len(rest)) if rest else 0
        what = "gpu_power_node_budget_watts=%d gives %d W per GPU" % (budget, each)
    elif limit:
        each, what = limit, "gpu_power_limit_watts=%d" % limit
    else:
        each, what = wdefault, "the profile's default %d W" % wdefault
    for i in range(count):
        if i in fixed:
            watts, name = fixed[i]
            what_i = "%s=%d" % (name, watts)
        else:
            watts, what_i = each, what
        if watts < wmin or watts > wmax:
            raise AnsibleFilterError("%s: %s is %s the %d-%d W range of %s"
                                     % (who, what_i, "below" if watts < wmin else "above", wmin, wmax,
                                        profile_name))
        out[i] = int(watts)
    return out


def power_rack_split(budget_watts, hosts, rack="rack"):
    """Split a rack budget evenly (floored) across its hosts: {host: watts}."""
    budget = _int(budget_watts, "rack_power_budget_watts", rack)
    hosts = list(hosts or [])
    if not hosts:
        return {}
    if budget <= 0:
        raise AnsibleFilterError("%s: rack_power_budget_watts=%d must be positive" % (rack, budget))
    each = budget // len(hosts)
    return dict((h, each) for h in hosts)


def power_rack_report(racks, hostvars, cap_var="bmc_power_node_cap_watts", budget_var="rack_power_budget_watts"):
    """One entry per rack that has a budget: {rack, budget_watts, total_watts, caps {host: watts}, over, text}.

    racks maps rack name to its host list (groups); hostvars gives each host's cap (cap_var, 0 or unset:
    an even share of the budget) and the rack's budget (budget_var, from group_vars of the rack).
    """
    report = []
    for rack in sorted(racks or {}):
        hosts = list(racks[rack] or [])
        if not hosts:
            continue
        budgets = set()
        for h in hosts:
            value = (hostvars.get(h) or {}).get(budget_var)
            if value not in (None, "", 0):
                budgets.add(_int(value, budget_var, rack))
        if not budgets:
            continue
        if len(budgets) > 1:
            raise AnsibleFilterError("%s: the hosts of the rack disagree on %s (%s)"
                                     % (rack, budget_var, ", ".join(str(b) for b in sorted(budgets))))
        budget = budgets.pop()
        share = power_rack_split(budget, hosts, rack)
        caps = {}
        for h in hosts:
            cap = _int((hostvars.get(h) or {}).get(cap_var) or 0, cap_var, h)
            caps[h] = cap if cap > 0 else share[h]
        total = sum(caps.values())
        entry = {"rack": rack, "budget_watts": budget, "total_watts": total, "caps": caps,
                 "over": total > budget}
        entry["text"] = ("%s: node caps (%s) add up to %d W, over %s=%d W by %d W" % (
            rack, ", ".join("%s %d W" % (h, caps[h]) for h in hosts), total, budget_var, budget,
            total - budget)) if entry["over"] else ""
        report.append(entry)
    return report


def power_thermal_profiles(profiles, overrides=None):
    """The profile catalogue with each temperature_c {slowdown, alert} overridden by overrides[name]
    (bmc_power_gpu_temperature_c); fails unless every profile alerts strictly below its slowdown, and when an
    override raises a slowdown above the profile's own (the GPU slows down where the hardware does: an override
    may lower it, never raise it)."""
    out = {}
    overrides = overrides or {}
    if not isinstance(overrides, Mapping):
        raise AnsibleFilterError("bmc_power_gpu_temperature_c=%r is not a mapping of hardware profile names to "
                                 "{slowdown, alert}" % (overrides,))
    for name in sorted(overrides, key=str):
        if name not in (profiles or {}):
            raise AnsibleFilterError("bmc_power_gpu_temperature_c names %s, which is not a hardware profile" % name)
        if not isinstance(overrides[name] or {}, Mapping):
            raise AnsibleFilterError("bmc_power_gpu_temperature_c.%s=%r is not a mapping {slowdown, alert}"
                                     % (name, overrides[name]))
    for name, profile in sorted((profiles or {}).items()):
        base = dict((profile or {}).get("temperature_c") or {})
        temps = dict(base)
        temps.update(overrides.get(name) or {})
        try:
            slowdown, alert = float(temps["slowdown"]), float(temps["alert"])
        except (KeyError, TypeError, ValueError):
            raise AnsibleFilterError("%s: temperature_c needs numbers slowdown and alert (found %r)" % (name, temps))
        if "slowdown" in (overrides.get(name) or {}) and _number(base.get("slowdown")) is not None \
                and slowdown > _number(base["slowdown"]):
            raise AnsibleFilterError(
                "%s: bmc_power_gpu_temperature_c slowdown=%s is above the profile's temperature_c.slowdown=%s, where "
                "the GPU itself slows down (an override may lower it, never raise it)"
                % (name, temps["slowdown"], base["slowdown"]))
        if alert >= slowdown:
            raise AnsibleFilterError("%s: temperature_c.alert=%s must be below temperature_c.slowdown=%s"
                                     % (name, temps["alert"], temps["slowdown"]))
        merged = dict(profile)
        merged["temperature_c"] = temps
        out[name] = merged
    return out


class FilterModule(object):
    def filters(self):
        return {
            "power_gpu_limits": power_gpu_limits,
            "power_rack_split": power_rack_split,
            "power_rack_report": power_rack_report,
            "power_thermal_profiles": power_thermal_profiles,
        }
