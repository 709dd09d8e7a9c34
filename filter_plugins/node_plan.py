"""What each node should be, computed in one place: the node plan.

`node_plan` takes the hardware catalogue (hardware_profiles combined with hardware_profiles_extra) and the
node's own inventory and returns everything the provisioning roles and the verifiers need to agree on:
profile, rack, rail addresses, per-GPU power limits, node cap, thermal thresholds (with the site's
overrides), the expected topology and the gpu_health expectations. `playbooks/vars/hardware_profiles.yml`
defines the variable `node_plan` with it once; gpu_power, bmc_power, nvidia_driver, inference_runtime,
node_exporter's health timer, node_verify (gpu_health, nvlink_topology, the multi-node NCCL run) and the
readiness report read it, and nothing re-derives it.
"""

import importlib.util
import os
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def _sibling(name):
    """<name>.py of this directory, loaded by path under a private name (filter_plugins is not a package)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location("gpulab_filter_%s" % name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_network, _power = _sibling("network"), _sibling("power")
RAIL_HOST_OFFSET, rail_address = _network.RAIL_HOST_OFFSET, _network.rail_address
power_gpu_limits, power_thermal_profiles = _power.power_gpu_limits, _power.power_thermal_profiles


def node_rack(group_names, prefix="rack_"):
    """The node's rack: its one inventory group named with the rack prefix ('' when none)."""
    racks = sorted(g for g in (group_names or []) if str(g).startswith(prefix))
    return racks[0] if racks else ""


def gpu_health_expected(profiles, name, power_limit_watts=None, driver_version=None, power_limits_watts=None):
    """gpu_health's `expected` for hardware profile `name` of the catalogue `profiles`. power_limit_watts: the
    limit in effect on every GPU (empty: the profile's default); power_limits_watts: {index: watts} when the
    GPUs' limits differ; driver_version: branch or version every GPU must report (empty: not checked)."""
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
    if power_limits_watts and len(set(power_limits_watts.values())) > 1:
        del expected["power_limit_watts"]
        expected["power_limits_watts"] = dict((str(k), int(v)) for k, v in sorted(power_limits_watts.items()))
    if driver_version not in (None, ""):
        expected["driver_version"] = str(driver_version)
    return expected


def topology_expected(profile):
    """nvlink_topology's `expected` for a profile: GPU and NIC counts, NIC distance and, with NVLink, the
    link code on every GPU pair and every link of every GPU active."""
    out = {"gpu_count": profile["gpu_count"], "nic_count": profile["nic_count"],
           "nic_max_distance": profile["nic_max_distance"]}
    nvlink = profile.get("nvlink") or {}
    if nvlink.get("link_code"):
        out.update(link_code=nvlink["link_code"], links_per_gpu=nvlink["links_per_gpu"], nvlinks_active=True)
    return out


def _rails(host, rails, node_index, overrides):
    out = []
    for rail in rails or []:
        if not isinstance(rail, Mapping) or not rail.get("name") or not rail.get("subnet"):
            raise AnsibleFilterError("node_plan: %s: rdma_rails entry %r needs name and subnet" % (host, rail))
        if rail["name"] in (overrides or {}):
            address = str(overrides[rail["name"]]).split("/")[0]
        elif node_index is None:
            address = None
        else:
            address = rail_address(rail["subnet"], node_index, offset=rail.get("offset", RAIL_HOST_OFFSET))
        out.append({"name": rail["name"], "subnet": str(rail["subnet"]), "mtu": rail.get("mtu"), "address": address})
    return out


def node_plan(catalogue, host, hardware_profile, group_names=None, node_index=None, rails=None,
              rail_addresses=None, rack_prefix="rack_", gpu_power_limit_watts=0, gpu_power_node_budget_watts=0,
              gpu_power_limits_watts=None, node_cap_watts=None, rack_budget_watts=None, groups=None,
              thermal_overrides=None, driver_version=None, acceptance_thresholds=None):
    """The node plan of `host` (see the module docstring). Fails naming the host and the variable when the
    inventory does not describe a node the catalogue knows."""
    if not isinstance(catalogue, Mapping) or not catalogue:
        raise AnsibleFilterError("node_plan: %s: the hardware catalogue is empty (load playbooks/vars/"
                                 "hardware_profiles.yml)" % host)
    if hardware_profile not in catalogue:
        raise AnsibleFilterError("node_plan: %s: hardware_profile=%s is not a key of hardware_profiles "
                                 "(known: %s)" % (host, hardware_profile, ", ".join(sorted(catalogue))))
    overrides = thermal_overrides or {}
    if isinstance(overrides, Mapping):  # anything else: power_thermal_profiles names it
        overrides = dict((k, v) for k, v in overrides.items() if k == hardware_profile)
    profile = dict(power_thermal_profiles({hardware_profile: catalogue[hardware_profile]}, overrides)[hardware_profile])
    limits = power_gpu_limits(profile, limit_watts=gpu_power_limit_watts, node_budget_watts=gpu_power_node_budget_watts,
                              per_gpu=gpu_power_limits_watts, host=host, profile_name=hardware_profile)
    uniform = next(iter(limits.values())) if len(set(limits.values())) == 1 else None
    index = int(node_index) if node_index not in (None, "") else None
    plan_rails = _rails(host, rails, index, rail_addresses)
    model = profile.get("acceptance_model")
    rack = node_rack(group_names, rack_prefix)
    cap = _power._int(node_cap_watts or 0, "bmc_power_node_cap_watts", host)
    share, source = None, "bmc_power_node_cap_watts" if cap > 0 else None
    if cap <= 0 and rack_budget_watts not in (None, "", 0) and rack:
        # no explicit cap: the node's even share of its rack's budget (power_rack_split, as bmc_power applies it)
        share = _power.power_rack_split(rack_budget_watts, (groups or {}).get(rack) or [host], rack).get(host, 0)
        cap, source = share, "rack_power_budget_watts"
    non_gpu = profile.get("non_gpu_watts")
    non_gpu = non_gpu if isinstance(non_gpu, int) and not isinstance(non_gpu, bool) else None
    return {
        "host": host,
        "profile_name": hardware_profile,
        "profile": profile,
        "rack": rack,
        "node_index": index,
        "gpu_count": int(profile["gpu_count"]),
        "fabric_manager": bool(profile.get("nvswitch")),
        "nic_count": profile.get("nic_count"),
        "power": {
            "gpu_limits_watts": limits,
            "gpu_limit_watts": uniform,
            "gpu_min_watts": profile["power_watts"]["min"], "gpu_max_watts": profile["power_watts"]["max"],
            "node_cap_watts": cap if cap > 0 else None,
            # where node_cap_watts comes from: bmc_power_node_cap_watts, rack_power_budget_watts or none
            "node_cap_source": source if cap > 0 else None,
            # the node's even share of its rack's rack_power_budget_watts when it has no cap of its own (None
            # otherwise), even a share of 0 W, which leaves node_cap_watts None
            "rack_share_watts": share,
            # what the node draws besides its GPUs (the profile's non_gpu_watts), and the smallest node cap that
            # covers the GPUs at their limits plus that draw (preflight checks node_cap_watts against it)
            "non_gpu_watts": non_gpu,
            "node_min_cap_watts": sum(limits.values()) + non_gpu if non_gpu is not None else None,
        },
        "thermal": {"alert_c": profile["temperature_c"]["alert"], "slowdown_c": profile["temperature_c"]["slowdown"]},
        "topology_expected": topology_expected(profile),
        "gpu_health_expected": gpu_health_expected({hardware_profile: profile}, hardware_profile, uniform,
                                                   driver_version, None if uniform is not None else limits),
        "rails": plan_rails,
        "rail_addresses": dict((r["name"], r["address"]) for r in plan_rails if r["address"]),
        "driver_version": str(driver_version) if driver_version not in (None, "") else None,
        "acceptance": dict((acceptance_thresholds or {}).get(model) or {}),
    }


# node_plan's keyword arguments, each with the inventory variable it comes from and that variable's default: the
# variable `node_plan` (playbooks/vars/hardware_profiles.yml) passes exactly these (tests/unit/test_plan_report.py
# keeps the two equal), and node_plan_of reads them from a host's variables for the plan of the whole cluster.
NODE_PLAN_INPUTS = (
    ("node_index", "node_index", None),
    ("rails", "rdma_rails", []),
    ("rail_addresses", "rdma_rail_addresses", {}),
    ("rack_prefix", "rack_group_prefix", "rack_"),
    ("gpu_power_limit_watts", "gpu_power_limit_watts", 0),
    ("gpu_power_node_budget_watts", "gpu_power_node_budget_watts", 0),
    ("gpu_power_limits_watts", "gpu_power_limits_watts", {}),
    ("node_cap_watts", "bmc_power_node_cap_watts", 0),
    ("rack_budget_watts", "rack_power_budget_watts", 0),
    ("thermal_overrides", "bmc_power_gpu_temperature_c", {}),
    ("driver_version", "node_verify_driver_version", ""),
)


# Every variable node_plan_of reads from a host.
NODE_PLAN_VARIABLES = ("hardware_profile", "group_names", "hardware_profiles_extra", "acceptance_thresholds_extra") \
    + tuple(name for _arg, name, _default in NODE_PLAN_INPUTS)


def node_plan_of(host, host_vars, groups, hardware_profiles, acceptance_thresholds=None):
    """The plan of `host` from its variables (a mapping such as hostvars[host]), computed as the variable
    `node_plan` computes it inside a play of that host: the catalogue with the host's hardware_profiles_extra,
    the acceptance thresholds with its acceptance_thresholds_extra, every input of NODE_PLAN_INPUTS."""
    def var(name, default):  # `name | default(default)`: an unset variable takes the default, a null stays null
        return host_vars[name] if name in host_vars else default

    catalogue = dict(hardware_profiles or {})
    catalogue.update(var("hardware_profiles_extra", {}) or {})
    thresholds = dict(acceptance_thresholds or {})
    thresholds.update(var("acceptance_thresholds_extra", {}) or {})
    kwargs = dict((arg, var(name, default)) for arg, name, default in NODE_PLAN_INPUTS)
    return node_plan(catalogue, host, var("hardware_profile", None), var("group_names", []), groups=groups,
                     acceptance_thresholds=thresholds, **kwargs)


class FilterModule:
    def filters(self):
        return {"node_plan": node_plan, "node_rack": node_rack}
