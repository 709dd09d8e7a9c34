"""What a node's GPUs should be, from its hardware profile: the one mapping gpu_health (node_verify) and
the node_exporter health timer both use, so an alert and the readiness report judge against the same
expectations."""

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def gpu_health_expected(profiles, name, power_limit_watts=None, driver_version=None):
    """gpu_health's `expected` for hardware profile `name` of the catalogue `profiles` (hardware_profiles
    combined with hardware_profiles_extra). power_limit_watts: the limit in effect (empty: the profile's
    default); driver_version: branch or version every GPU must report (empty: not checked)."""
    if not isinstance(profiles, Mapping) or name not in profiles:
        raise AnsibleFilterError("gpu_health_expected: %r is not a hardware profile (known: %s)"
                                 % (name, ", ".join(sorted(profiles or {}))))
    p = profiles[name]
    try:
        expected = {
            "gpu_count": int(p["gpu_count"]),
            "pcie": {"gen": int(p["pcie"]["gen"]), "width": int(p["pcie"]["width"])},
            "temperature_alert_c": int(p["temperature_c"]["alert"]),
            "nvswitch": bool(p["nvswitch"]),
            "power_limit_watts": int(power_limit_watts if power_limit_watts not in (None, "")
                                     else p["power_watts"]["default"]),
            "memory_repairs_reported": bool(p.get("memory_repairs_reported", True)),
        }
    except (KeyError, TypeError, ValueError) as e:
        raise AnsibleFilterError("gpu_health_expected: hardware profile %s: %s %s" % (name, type(e).__name__, e))
    if driver_version not in (None, ""):
        expected["driver_version"] = str(driver_version)
    return expected


class FilterModule:
    def filters(self):
        return {"gpu_health_expected": gpu_health_expected}
