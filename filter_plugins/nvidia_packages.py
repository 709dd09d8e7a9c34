"""The NVIDIA driver package set of one node, named and versioned as the chosen repository ships it.

The rules come from ../shared/fixtures/nvidia-packages.md (section numbers below):

- layout ``cuda-ubuntu``: NVIDIA's CUDA repository, Ubuntu builds (ubuntu2204, ubuntu2404). Branch-suffixed
  names with ``-open`` variants (``nvidia-driver-570-open``); from 590 the branch leaves the names and the
  branch is chosen by installing ``nvidia-driver-pinning-<version>`` first (§1.5).
- layout ``canonical``: Canonical's archive: ``-server`` and ``-server-open`` names (§1.1); the extras
  (Fabric Manager, NSCQ, ...) still come from the CUDA repository, as NVIDIA's own driver container pairs
  them (§4.2).
- layout ``debian``: NVIDIA's CUDA repository, Debian 12 builds: unbranched Debian names (§1.1).
- extras: branch-suffixed below 580, unbranched from 580 (the old names are virtual there, §1.5, §4.1);
  ``nvlsm`` has its own version scheme and is not pinned to the driver.

Versions: a pin is the upstream version with whatever revision the repository carries (``<upstream>-*``):
the same upstream is ``-0ubuntu1``, ``-1ubuntu1``, ``-0ubuntu0.24.04.1`` or ``-1`` depending on the
repository and the release (§1.3, §9). Fabric Manager must match the driver's upstream version exactly
(§4.2): ``nvidia_package_problems`` checks the repository's candidates before anything is installed.
"""

import re

from ansible.errors import AnsibleFilterError

LAYOUTS = ("cuda-ubuntu", "canonical", "debian")
KERNEL_MODULES = ("open", "proprietary")
EXTRAS = ("fabricmanager", "nscq", "nvsdm", "nvlsm", "imex")
# extra -> package stem in the CUDA repository
EXTRA_STEMS = {"fabricmanager": "nvidia-fabricmanager", "nscq": "libnvidia-nscq", "nvsdm": "libnvsdm",
               "imex": "nvidia-imex"}
UNBRANCHED_EXTRAS_FROM = 580
UNBRANCHED_UBUNTU_FROM = 590
PINNING_FROM = 590
VERSION_RE = re.compile(r"^([0-9]{3})\.[0-9]+(\.[0-9]+)?$")
# dpkg-query patterns of every package this set can contain, any branch: what a branch change replaces.
PATTERNS = ["nvidia-driver*", "nvidia-dkms*", "nvidia-kernel-common*", "nvidia-utils*", "libnvidia-compute*",
            "nvidia-compute-utils*", "nvidia-fabricmanager*", "libnvidia-nscq*", "libnvsdm*", "nvidia-imex*",
            "nvlsm", "nvidia-kernel-dkms", "nvidia-kernel-open-dkms", "nvidia-kernel-support", "nvidia-smi",
            "libnvidia-ml1", "libcuda1", "nvidia-persistenced", "nvidia-modprobe", "firmware-nvidia-gsp",
            "nvidia-driver-cuda"]
FM_MISMATCH = ("fabric manager NVIDIA GPU driver interface version %s don't match with driver version %s. "
               "Please update with matching NVIDIA driver package.")


def _fail(host, msg):
    raise AnsibleFilterError("nvidia_driver_package_set: %s: %s" % (host, msg))


def nvidia_driver_package_set(version, layout, kernel_modules="open", extras=None, host="?"):
    """The package set for driver `version` (upstream, e.g. 570.133.20) from repository `layout`.

    Returns {branch, version, pin, cuda_major, pinning_package, driver, extras, unpinned, packages,
    fabricmanager, patterns}: `packages` is every name to install and hold, `driver` + `extras` are pinned to
    `pin`, `unpinned` carry their own versions."""
    version = str(version)
    m = VERSION_RE.match(version)
    if not m:
        _fail(host, "nvidia_driver_version %r is not an upstream driver version such as 570.133.20 (the "
                    "repository's revision, e.g. -0ubuntu1, is not part of it)" % version)
    if layout not in LAYOUTS:
        _fail(host, "repository layout %r is not one of %s" % (layout, ", ".join(LAYOUTS)))
    if kernel_modules not in KERNEL_MODULES:
        _fail(host, "nvidia_driver_kernel_modules %r is not one of %s" % (kernel_modules, ", ".join(KERNEL_MODULES)))
    extras = list(extras or [])
    unknown = [e for e in extras if e not in EXTRAS]
    if unknown:
        _fail(host, "nvidia_driver_extras has %s (known: %s)" % (", ".join(map(str, unknown)), ", ".join(EXTRAS)))
    branch = int(m.group(1))
    open_ = kernel_modules == "open"
    if layout == "debian":
        driver = ["nvidia-kernel-open-dkms" if open_ else "nvidia-kernel-dkms", "nvidia-kernel-support",
                  "nvidia-driver-cuda", "nvidia-smi", "libnvidia-ml1", "libcuda1", "nvidia-persistenced",
                  "nvidia-modprobe", "firmware-nvidia-gsp"]
    else:
        if layout == "canonical":
            suffix = "-%d-server" % branch
        else:
            suffix = "" if branch >= UNBRANCHED_UBUNTU_FROM else "-%d" % branch
        flavour = "-open" if open_ else ""
        driver = ["nvidia-driver%s%s" % (suffix, flavour), "nvidia-dkms%s%s" % (suffix, flavour)] + [
            stem + suffix for stem in ("nvidia-kernel-common", "nvidia-utils", "libnvidia-compute",
                                       "nvidia-compute-utils")]
    pinned_extras, unpinned = [], []
    for extra in EXTRAS:
        if extra not in extras:
            continue
        if extra == "nvlsm":
            unpinned.append("nvlsm")
        elif branch >= UNBRANCHED_EXTRAS_FROM:
            pinned_extras.append(EXTRA_STEMS[extra])
        else:
            pinned_extras.append("%s-%d" % (EXTRA_STEMS[extra], branch))
    pinning = None
    if layout != "canonical" and branch >= PINNING_FROM:
        pinning = "nvidia-driver-pinning-%s" % version
    fabricmanager = next((p for p in pinned_extras if p.startswith("nvidia-fabricmanager")), None)
    return {
        "branch": str(branch),
        "version": version,
        "pin": version + "-*",
        # the CUDA major of the driver's user-mode runtime: 580 ships CUDA 13 (§5, DCGM's -cudaNN package)
        "cuda_major": 13 if branch >= 580 else 12,
        "pinning_package": pinning,
        "driver": driver,
        "extras": pinned_extras,
        "unpinned": unpinned,
        "packages": ([pinning] if pinning else []) + driver + pinned_extras + unpinned,
        "fabricmanager": fabricmanager,
        "patterns": PATTERNS + ["nvidia-driver-pinning-*"],
    }


def _upstream(version):
    """570.133.20-0ubuntu1 -> 570.133.20; 1:4.4.1-1 -> 4.4.1."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def parse_madison(text):
    """{package: [versions]} from `apt-cache madison` output ("name | version | source")."""
    out = {}
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not parts[0] or not parts[1]:
            continue
        out.setdefault(parts[0], [])
        if parts[1] not in out[parts[0]]:
            out[parts[0]].append(parts[1])
    return out


def nvidia_package_problems(madison, package_set, host="?"):
    """What stops the set from installing, read from `apt-cache madison <packages>`: a package the
    repositories do not have, or have at no version of the driver's upstream. Fabric Manager at another
    version fails with NVIDIA's own reason. [] when every package resolves."""
    found = parse_madison(madison)
    problems = []
    want = package_set["version"]
    for name in package_set["driver"] + package_set["extras"]:
        versions = found.get(name, [])
        if any(_upstream(v) == want for v in versions):
            continue
        have = ", ".join(versions) if versions else "none"
        if name == package_set["fabricmanager"] and versions:
            problems.append("%s: %s has %s, not %s: %s" % (host, name, have, want,
                                                           FM_MISMATCH % (_upstream(versions[0]), want)))
        else:
            problems.append("%s: %s: no version %s-* in the configured repositories (they have: %s)"
                            % (host, name, want, have))
    for name in package_set["unpinned"] + ([package_set["pinning_package"]] if package_set["pinning_package"] else []):
        if not found.get(name):
            problems.append("%s: %s is not in the configured repositories" % (host, name))
    return problems


class FilterModule:
    def filters(self):
        return {"nvidia_driver_package_set": nvidia_driver_package_set,
                "nvidia_package_problems": nvidia_package_problems}
