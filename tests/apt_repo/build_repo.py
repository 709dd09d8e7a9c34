#!/usr/bin/env python3
"""Build the test double of NVIDIA's CUDA apt repository: a signed flat repository of fake packages.

TEST ONLY. The packages carry NVIDIA's names, versions and dependency shape but no NVIDIA software:
their "binaries" are shell scripts and their systemd units run /bin/sleep. They exist so that the
node baseline roles run repository setup, key handling, pinning, holds and branch upgrades for real
through apt in Molecule and in the lab, where NVIDIA's servers cannot be reached.

Usage: build_repo.py OUT_DIR
Writes OUT_DIR/repo/ and the same as OUT_DIR/repo.tar: one signed flat repository per layout
(repo/<layout>/: *.deb, Packages, Packages.gz, Release, Release.gpg, InRelease), repo/sources/ (the
nccl-tests source release double and its SHA256SUMS), repo/pypi/<project>/ (the wheels found in
OUT_DIR/wheels, a pip index), repo/key.asc and repo/stamp-<digest>; and OUT_DIR/gnupg/ (the throwaway signing key, generated on
first run, never committed).
A second run with the same package list changes nothing (stamp file), so playbooks that copy the
repository stay idempotent.
Needs dpkg-deb, gpg and gcc (the NVML double, nvml_shim.c) on PATH; everything else is the Python standard
library.
"""

import fcntl
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from email.utils import formatdate
from pathlib import Path

ARCH = "amd64"
# The repositories, each a flat apt repository under its own directory, spelled as the real ones are
# (../shared/fixtures/nvidia-packages.md, sections cited per layout). `kind` picks the naming scheme:
#   cuda-ubuntu: NVIDIA's CUDA repository, Ubuntu builds (§1.1, §1.2): branch-suffixed names, -open variants,
#                revisions -0ubuntu1 or -1ubuntu1 by release (§1.3); from 590 unbranched, with
#                nvidia-driver-pinning-<version> packages (§1.5). Fabric Manager, NSCQ, NVSDM, IMEX at -1 (§4.1),
#                unbranched from 580 with the old name as a virtual package.
#   canonical:   Canonical's archive (§1.1): -server[-open] names, -0ubuntu0.<release>.1; its own
#                nvidia-fabricmanager-<branch> at that revision too (§1.4, §9).
#   debian:      NVIDIA's CUDA repository, Debian 12 builds (§1.1): unbranched Debian names at -1, except
#                Fabric Manager/NSCQ below 580 (nvidia-fabricmanager-570_570.195.03-1).
# Each release: upstream version -> driver revision (the extras of the CUDA repository are always -1).
# A release listed with fm=False has no Fabric Manager at its version (the CUDA repository lagging the
# driver): the role must refuse it before installing anything.
LAYOUTS = {
    "ubuntu2204": {"kind": "cuda-ubuntu", "releases": {
        "550.90.07": {"rev": "0ubuntu1"}, "570.133.20": {"rev": "0ubuntu1"},
        "570.148.08": {"rev": "1ubuntu1", "fm": False}, "580.126.09": {"rev": "1ubuntu1"}}},
    "ubuntu2404": {"kind": "cuda-ubuntu", "releases": {
        "570.133.20": {"rev": "0ubuntu1"}, "580.126.09": {"rev": "1ubuntu1"}, "590.48.01": {"rev": "1ubuntu1"}}},
    "canonical-noble": {"kind": "canonical", "releases": {
        "570.133.20": {"rev": "0ubuntu0.24.04.1"}, "580.126.09": {"rev": "0ubuntu0.24.04.1"}}},
    "debian12": {"kind": "debian", "releases": {
        "535.161.08": {"rev": "1"}, "550.90.07": {"rev": "1"}, "570.133.20": {"rev": "1"},
        "580.105.08": {"rev": "1"}, "580.126.09": {"rev": "1"}}},
}
# Copies of a layout with one package left out, for the test that a role and verify name what is missing.
VARIANTS = {"debian12-without-dcgm": ("debian12", "datacenter-gpu-manager-4-core")}
# The distribution directories that also carry CUDA, NCCL and DCGM (NVIDIA's CUDA repositories).
CUDA_LAYOUTS = ("ubuntu2204", "ubuntu2404", "debian12")
# CUDA minor -> toolkit version, NCCL version (NVIDIA's "+cudaX.Y" suffix), cuDNN version.
CUDA_RELEASES = {
    "12.2": {"toolkit": "12.2.2-1", "nccl": "2.19.3-1+cuda12.2", "cudnn": "9.1.0.70-1"},
    "12.4": {"toolkit": "12.4.1-1", "nccl": "2.21.5-1+cuda12.4", "cudnn": "9.1.0.70-1"},
    "12.8": {"toolkit": "12.8.1-1", "nccl": "2.25.1-1+cuda12.8", "cudnn": "9.8.0.87-1"},
}
# DCGM (§5): DCGM 3 one package at 1:3.3.x (no revision); DCGM 4 split, 1:4.x.y-1, cuda13 from 4.4.0.
DCGM3_VERSIONS = ["1:3.3.6", "1:3.3.9"]
DCGM4_VERSIONS = ["1:4.2.3-2", "1:4.4.1-1"]
# nccl-tests is not a package (§6): a source release the role builds; this is its test double.
NCCL_TESTS_VERSION = "2.17.6"
MAINTAINER = "gpulab test doubles <tests@gpulab.invalid>"
SERVICE = """[Unit]
Description={desc} (gpulab test double)

[Service]
Type=simple
ExecStart={exe}

[Install]
WantedBy=multi-user.target
"""
# What a node without the lab's GPU simulator gets from the fake tools: the real tools' answer on a
# machine whose driver cannot be reached (nvidia-smi exits 9 then).
NO_GPU = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
          "latest NVIDIA driver is installed and running.")
SIMULATOR = "/opt/gpusim/nvidia_smi.py"
VERSION_FILE = "usr/share/gpulab-fake/nvidia-driver-version"


def script(text):
    return {"mode": 0o755, "text": "#!/bin/sh\n# gpulab test double, not NVIDIA software\n" + text}


def tool(name, missing=NO_GPU, rc=9):
    """A tool whose answers are the lab simulator's replay of recorded outputs; without the simulator (no
    GPU) it fails as the real one does on a machine without a driver."""
    return script('if [ -x %s ]; then GPUSIM_TOOL=%s exec %s "$@"; fi\necho "%s" >&2\nexit %d\n'
                  % (SIMULATOR, name, SIMULATOR, missing, rc))


def fabricmanager_files(upstream):
    """nv-fabricmanager refuses a driver of another version with NVIDIA's message (§4.2)."""
    check = ('drv=$(cat /%s 2>/dev/null || echo none)\nif [ "$drv" != "%s" ]; then\n'
             '  echo "fabric manager NVIDIA GPU driver interface version %s don\'t match with driver version '
             '$drv. Please update with matching NVIDIA driver package." >&2\n  exit 1\nfi\n'
             'exec /bin/sleep infinity\n' % (VERSION_FILE, upstream, upstream))
    return {"usr/bin/nv-fabricmanager": script(check),
            "lib/systemd/system/nvidia-fabricmanager.service": {"text": SERVICE.format(
                desc="NVIDIA fabric manager service", exe="/usr/bin/nv-fabricmanager")}}


def driver_roles(kind, branch, upstream):
    """The driver components of one release: [(role, name, files)]. `role` is the conflict key between
    releases (two releases' packages of one role cannot both be installed, as on a real system)."""
    b = int(branch)
    persist = {"usr/bin/nvidia-persistenced": script("exec /bin/sleep infinity\n"),
               "lib/systemd/system/nvidia-persistenced.service": {"text": SERVICE.format(
                   desc="NVIDIA Persistence Daemon", exe="/usr/bin/nvidia-persistenced")}}
    smi = {"usr/bin/nvidia-smi": tool("nvidia-smi")}
    # NVML: the lab's libnvidia-ml double (nvml_shim.c, answering from the simulator), named and linked as the
    # real library is (libnvidia-ml.so.1 -> libnvidia-ml.so.<version>)
    nvml = {"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%s" % upstream: {"build": "nvml_shim"},
            "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1": {"link": "libnvidia-ml.so.%s" % upstream}}
    kernel = {VERSION_FILE: {"text": upstream + "\n"}}
    if kind == "debian":
        return [("kmod", "nvidia-kernel-dkms", kernel), ("kmod-open", "nvidia-kernel-open-dkms", kernel),
                ("support", "nvidia-kernel-support", {}), ("smi", "nvidia-smi", smi), ("nvml", "libnvidia-ml1", nvml),
                ("cuda", "libcuda1", {}), ("persistenced", "nvidia-persistenced", persist),
                ("modprobe", "nvidia-modprobe", {}), ("gsp", "firmware-nvidia-gsp", {}),
                ("driver-cuda", "nvidia-driver-cuda", {})]
    suffix = {"canonical": "-%s-server" % branch, "cuda-ubuntu": "" if b >= 590 else "-%s" % branch}[kind]
    out = []
    for role, stem, files in (("kernel-common", "nvidia-kernel-common", kernel), ("utils", "nvidia-utils", smi),
                              ("compute", "libnvidia-compute", nvml), ("compute-utils", "nvidia-compute-utils", persist)):
        out.append((role, stem + suffix, files))
    for flavour in ("", "-open"):
        out.append(("dkms" + flavour, "nvidia-dkms" + suffix + flavour, {}))
        out.append(("driver" + flavour, "nvidia-driver" + suffix + flavour, {}))
    return out


def extras(kind, branch, upstream):
    """Fabric Manager, NSCQ, NVSDM, IMEX as the CUDA repository names them (§4.1): [(name, provides, files)]."""
    b = int(branch)
    fm = fabricmanager_files(upstream)
    names = [("nvidia-fabricmanager", fm), ("libnvidia-nscq", {}), ("nvidia-imex", {})]
    if b >= 570:
        names.append(("libnvsdm", {}))
    if b >= 580:
        return [(n, "%s-%s" % (n, branch), f) for n, f in names]
    return [("%s-%s" % (n, branch), None, f) for n, f in names]


def driver_packages():
    pkgs = []
    for layout, spec in LAYOUTS.items():
        kind = spec["kind"]
        for upstream, rel in spec["releases"].items():
            branch = upstream.split(".")[0]
            ver = "%s-%s" % (upstream, rel["rev"])
            comps = driver_roles(kind, branch, upstream)
            names = dict((role, name) for role, name, _ in comps)
            for role, name, files in comps:
                # open and proprietary flavours of one component replace each other, as on a real system
                key = "gpulab-nvidia-%s" % role.replace("-open", "")
                fields = {"Provides": key, "Conflicts": key, "Replaces": key}
                deps = []
                if kind == "debian" and role == "driver-cuda":
                    deps = ["kmod|kmod-open", "smi", "nvml", "persistenced"]
                elif role.startswith("driver"):
                    deps = [role.replace("driver", "dkms"), "kernel-common", "utils", "compute", "compute-utils"]
                elif role in ("dkms", "dkms-open", "kmod", "kmod-open"):
                    deps = ["kernel-common"] if kind != "debian" else ["support"]
                if deps:
                    fields["Depends"] = ", ".join(" | ".join("%s (= %s)" % (names[a], ver) for a in d.split("|"))
                                                  for d in deps)
                pkgs.append({"layout": layout, "name": name, "version": ver, "fields": fields, "files": files})
            if kind == "cuda-ubuntu" and int(branch) >= 590:
                pin = "nvidia-driver-pinning-%s" % upstream
                pkgs.append({"layout": layout, "name": pin, "version": "%s-1" % upstream, "fields": {},
                             "files": {"etc/apt/preferences.d/%s" % pin: {"text": "".join(
                                 "Package: %s\nPin: version %s-*\nPin-Priority: 1000\n\n" % (n, upstream)
                                 for _, n, _ in comps)}}})
            if kind == "canonical":
                # Canonical's own Fabric Manager at its own revision; the CUDA repository's (-1) sorts above it.
                pkgs.append({"layout": layout, "name": "nvidia-fabricmanager-%s" % branch, "version": ver,
                             "fields": {"Provides": "gpulab-nvidia-fm", "Conflicts": "gpulab-nvidia-fm",
                                        "Replaces": "gpulab-nvidia-fm"},
                             "files": fabricmanager_files(upstream)})
                continue
            for name, provides, files in extras(kind, branch, upstream):
                if name.startswith("nvidia-fabricmanager") and rel.get("fm") is False:
                    continue
                role = name.replace("-" + branch, "")
                fields = {"Provides": ", ".join(p for p in (provides, "gpulab-%s" % role) if p),
                          "Conflicts": "gpulab-%s" % role, "Replaces": "gpulab-%s" % role}
                pkgs.append({"layout": layout, "name": name, "version": "%s-1" % upstream, "fields": fields,
                             "files": files})
        if kind == "cuda-ubuntu":
            pkgs.append({"layout": layout, "name": "nvlsm", "version": "2025.06.5-1", "fields": {},
                         "files": {"usr/share/gpulab-fake/nvlsm": {"text": "nvlsm\n"}}})
    return pkgs


HOSTENGINE_UNREACHABLE = ("Error: unable to establish a connection to the specified host: localhost\nError: Unable "
                          "to connect to host engine. Host engine connection invalid/disconnected.")


def dcgm_files(version):
    """dcgmi answers only while the host engine does (§5 "What dcgmi diag needs"): it first connects to
    localhost:5555 as the real client does, then replays the simulator's diagnostic. nv-hostengine listens on
    that port and logs the real start line."""
    upstream = version.split(":")[-1].split("-")[0]
    probe = ('if ! /usr/bin/python3 -c \'import socket; socket.create_connection(("127.0.0.1", 5555), 2)\' '
             '2>/dev/null; then\n  echo "%s" >&2\n  exit 255\nfi\n' % HOSTENGINE_UNREACHABLE)
    dcgmi = tool("dcgmi", HOSTENGINE_UNREACHABLE, 255)
    dcgmi["text"] = dcgmi["text"].replace("if [ -x", probe + "if [ -x", 1)
    engine = ("exec /usr/bin/python3 -c '\nimport socket\ns = socket.socket()\n"
              "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind((\"127.0.0.1\", 5555))\n"
              "s.listen(16)\nprint(\"Started host engine version %s using port number: 5555\", flush=True)\n"
              "while True:\n    s.accept()[0].close()\n'\n" % upstream)
    return {"usr/bin/dcgmi": dcgmi, "usr/bin/nv-hostengine": script(engine),
            "lib/systemd/system/nvidia-dcgm.service": {"text": SERVICE.format(
                desc="NVIDIA DCGM service", exe="/usr/bin/nv-hostengine -n --service-account nvidia-dcgm")}}


def dcgm_packages(layout):
    pkgs = [{"layout": layout, "name": "datacenter-gpu-manager", "version": v,
             "fields": {"Conflicts": "datacenter-gpu-manager-4-core"}, "files": dcgm_files(v)} for v in DCGM3_VERSIONS]
    for v in DCGM4_VERSIONS:
        pkgs.append({"layout": layout, "name": "datacenter-gpu-manager-4-core", "version": v,
                     "fields": {"Conflicts": "datacenter-gpu-manager"}, "files": dcgm_files(v)})
        for major in ("12", "13") if v >= "1:4.4" else ("12",):
            pkgs.append({"layout": layout, "name": "datacenter-gpu-manager-4-cuda%s" % major, "version": v,
                         "fields": {"Depends": "datacenter-gpu-manager-4-core (= %s)" % v,
                                    "Recommends": "datacenter-gpu-manager-4-proprietary-cuda%s" % major},
                         "files": {"usr/share/gpulab-fake/dcgm-cuda%s" % major: {"text": v + "\n"}}})
    return pkgs


def cuda_packages(layout):
    pkgs = []
    for cuda, rel in CUDA_RELEASES.items():
        dash = cuda.replace(".", "-")
        pkgs += [
            {"name": "cuda-toolkit-%s" % dash, "version": rel["toolkit"], "fields": {},
             "files": {"usr/local/cuda-%s/version.json" % cuda: {"text": json.dumps(
                 {"cuda": {"name": "CUDA SDK", "version": rel["toolkit"].split("-")[0]}}) + "\n"},
                       "usr/local/cuda-%s/bin/nvcc" % cuda: script(
                           "echo 'Cuda compilation tools, release %s'\n" % cuda)}},
            {"name": "libnccl2", "version": rel["nccl"], "fields": {},
             "files": {"usr/share/gpulab-fake/libnccl2-cuda%s" % cuda: {"text": rel["nccl"] + "\n"}}},
            {"name": "libnccl-dev", "version": rel["nccl"],
             "fields": {"Depends": "libnccl2 (= %s)" % rel["nccl"]},
             "files": {"usr/include/nccl.h": {"text": "/* gpulab test double of NCCL %s */\n" % rel["nccl"]}}},
            {"name": "libcudnn9-cuda-12", "version": "%s+cuda%s" % (rel["cudnn"], cuda), "fields": {},
             "files": {"usr/share/gpulab-fake/libcudnn9-cuda%s" % cuda: {"text": rel["cudnn"] + "\n"}}},
        ]
    for p in pkgs:
        p["layout"] = layout
    return pkgs + dcgm_packages(layout)


HERE = Path(__file__).resolve().parent


def doca_packages():
    """DOCA-OFED's host tools (mlnx_qos, cma_roce_tos) as mlnx-tools, under the doca-ofed metapackage. Their
    payload (mlnx_tools.py) answers from recorded mlnx_qos outputs in tests/fixtures, keeping each port's
    state in /run (forgotten at reboot, as a NIC's is). The version strings are this double's own: the
    reference records no DOCA package versions."""
    tool = {"mode": 0o755, "text": (HERE / "mlnx_tools.py").read_text()}
    data = dict(("usr/share/gpulab-fake/mlnx-tools/%s" % name,
                 {"text": (HERE.parent / "fixtures" / name).read_text()})
                for name in ("mlnx_qos_i_pcp_default_524160buf_mlx5_centos12_magnate3.txt",
                             "mlnx_qos_i_dscp_pfc3_buffers_mlx5_ens14f0_magnate3.txt"))
    files = dict(data, **{"usr/bin/mlnx_qos": tool, "usr/bin/cma_roce_tos": tool})
    return [{"layout": "doca", "name": "mlnx-tools", "version": "25.01-0.2.0", "fields": {"Depends": "python3"},
             "files": files},
            {"layout": "doca", "name": "doca-ofed", "version": "2.10.0-1", "fields": {"Depends": "mlnx-tools"},
             "files": {}}]


def packages():
    """Every fake package: layout (repository directory), name, version, control fields, files."""
    pkgs = driver_packages() + doca_packages()
    for layout in CUDA_LAYOUTS:
        pkgs += cuda_packages(layout)
    pkgs.append({"layout": "libnvidia-container", "name": "nvidia-container-toolkit", "version": "1.17.4-1",
                 "fields": {},
                 "files": {"usr/bin/nvidia-container-runtime": script("exec /usr/bin/runc \"$@\"\n"),
                           "usr/bin/nvidia-ctk": script("echo 'NVIDIA Container Toolkit CLI version 1.17.4'\n")}})
    return pkgs


# The nccl-tests source release double: a Makefile that checks what the real build needs (nvcc under
# CUDA_HOME, nccl.h under NCCL_HOME, mpi.h under MPI_HOME with MPI=1) and installs the tools as wrappers of
# the simulator's replay, where the real one compiles them.
NCCL_TESTS_MAKEFILE = """# gpulab test double of the nccl-tests %(v)s source release: not NVIDIA software
CUDA_HOME ?= /usr/local/cuda
NCCL_HOME ?= /usr
MPI_HOME ?= /usr/lib/x86_64-linux-gnu/openmpi
MPI ?= 0
BUILDDIR ?= build
TOOLS = all_reduce_perf all_gather_perf broadcast_perf reduce_scatter_perf sendrecv_perf

all:
\t@test -x $(CUDA_HOME)/bin/nvcc || { echo "make: $(CUDA_HOME)/bin/nvcc: No such file or directory"; exit 2; }
\t@test -f $(NCCL_HOME)/include/nccl.h || { echo "src/common.h: fatal error: nccl.h: No such file or directory"; exit 2; }
\t@if [ "$(MPI)" = 1 ]; then test -f $(MPI_HOME)/include/mpi.h || { echo "src/common.h: fatal error: mpi.h: No such file or directory"; exit 2; }; fi
\t@mkdir -p $(BUILDDIR)
\t@for t in $(TOOLS); do cp src/tool.sh $(BUILDDIR)/$$t; sed -i "s/@TOOL@/$$t/" $(BUILDDIR)/$$t; chmod 755 $(BUILDDIR)/$$t; done
\t@echo "Compiling nccl-tests %(v)s (MPI=$(MPI)) against $(CUDA_HOME) $(NCCL_HOME)"
"""


def nccl_tests_source(out_dir):
    """Write nccl-tests-<v>.tar.gz (deterministic) and SHA256SUMS into out_dir."""
    import io
    out_dir.mkdir(parents=True, exist_ok=True)
    top = "nccl-tests-%s" % NCCL_TESTS_VERSION
    tool_text = tool("@TOOL@", "gpulab nccl-tests double: no GPU simulator on this node", 1)["text"]
    members = {"Makefile": NCCL_TESTS_MAKEFILE % {"v": NCCL_TESTS_VERSION}, "src/tool.sh": tool_text,
               "README.md": "gpulab test double of nccl-tests %s\n" % NCCL_TESTS_VERSION}
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name in sorted(members):
            data = members[name].encode()
            info = tarfile.TarInfo("%s/%s" % (top, name))
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    name = "%s.tar.gz" % top
    with gzip.GzipFile(out_dir / name, "wb", mtime=0) as fh:
        fh.write(raw.getvalue())
    digest = hashlib.sha256((out_dir / name).read_bytes()).hexdigest()
    (out_dir / "SHA256SUMS").write_text("%s  %s\n" % (digest, name))


def run(*argv, **kw):
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, **kw).stdout


_COMPILED = {}


def compiled(name):
    """tests/apt_repo/<name>.c built as a shared library (once per run), e.g. the NVML double."""
    if name not in _COMPILED:
        with tempfile.TemporaryDirectory() as tmp:
            lib = Path(tmp) / (name + ".so")
            run("gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-std=gnu11",
                '-DGPUSIM_SIMULATOR="%s"' % SIMULATOR, "-Wl,-soname,libnvidia-ml.so.1",
                "-o", str(lib), str(HERE / (name + ".c")))
            _COMPILED[name] = lib.read_bytes()
    return _COMPILED[name]


def build_deb(pkg, pool):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        (root / "DEBIAN").mkdir(parents=True)
        for rel, spec in pkg["files"].items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if "link" in spec:
                path.symlink_to(spec["link"])
                continue
            if "build" in spec:
                path.write_bytes(compiled(spec["build"]))
            else:
                path.write_text(spec["text"])
            path.chmod(spec.get("mode", 0o644))
        control = {"Package": pkg["name"], "Version": pkg["version"], "Architecture": ARCH,
                   "Maintainer": MAINTAINER, "Section": "multiverse/devel", "Priority": "optional"}
        control.update(pkg["fields"])
        control["Description"] = "%s (gpulab test double)\n Fake package for tests, not NVIDIA software." % pkg["name"]
        (root / "DEBIAN" / "control").write_text("".join("%s: %s\n" % kv for kv in control.items()))
        # file names carry no epoch (datacenter-gpu-manager_3.3.6_amd64.deb for 1:3.3.6)
        deb = pool / ("%s_%s_%s.deb" % (pkg["name"], pkg["version"].split(":")[-1], ARCH))
        run("dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb))
    data = deb.read_bytes()
    stanza = dict(control)
    stanza.update({"Filename": "./" + deb.name, "Size": str(len(data)),
                   "MD5sum": hashlib.md5(data).hexdigest(), "SHA256": hashlib.sha256(data).hexdigest()})
    desc = stanza.pop("Description")
    return "".join("%s: %s\n" % kv for kv in stanza.items()) + "Description: %s\n" % desc


def ensure_key(gnupg):
    gnupg.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = dict(os.environ, GNUPGHOME=str(gnupg))
    if not run("gpg", "--batch", "--list-secret-keys", "--with-colons", env=env).strip():
        run("gpg", "--batch", "--passphrase", "", "--quick-gen-key",
            "gpulab test repository (throwaway) <tests@gpulab.invalid>", "ed25519", "sign", "1d", env=env)
    return env


def main(out):
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # Molecule scenarios and the lab run side by side and share this directory: one builds, the others wait
    # and then find it unchanged.
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return build(out)


def sign_index(repo, stanzas, env, label):
    index = "\n".join(stanzas)
    (repo / "Packages").write_text(index)
    with gzip.GzipFile(repo / "Packages.gz", "wb", mtime=0) as fh:
        fh.write(index.encode())
    release = ["Origin: gpulab-test-doubles", "Label: %s" % label, "Architectures: %s" % ARCH,
               "Date: %s" % formatdate(usegmt=True), "Acquire-By-Hash: no"]
    for field, algo in (("MD5Sum", hashlib.md5), ("SHA256", hashlib.sha256)):
        release.append("%s:" % field)
        for name in ("Packages", "Packages.gz"):
            data = (repo / name).read_bytes()
            release.append(" %s %d %s" % (algo(data).hexdigest(), len(data), name))
    (repo / "Release").write_text("\n".join(release) + "\n")
    run("gpg", "--batch", "--yes", "--clearsign", "-o", str(repo / "InRelease"), str(repo / "Release"), env=env)
    run("gpg", "--batch", "--yes", "-abs", "-o", str(repo / "Release.gpg"), str(repo / "Release"), env=env)


def build(out):
    repo, gnupg, stamp = out / "repo", out / "gnupg", out / "stamp"
    # wheels downloaded beside the repository (OUT_DIR/wheels) are served as a pip index under pypi/<project>/
    wheels = sorted((out / "wheels").glob("*.whl"))
    spec = json.dumps([packages(), [w.name for w in wheels]], sort_keys=True)
    sources = Path(__file__).read_text() + (HERE / "nvml_shim.c").read_text()
    digest = hashlib.sha256((spec + sources).encode()).hexdigest()
    if stamp.is_file() and stamp.read_text() == digest and (repo / "key.asc").is_file():
        print("unchanged %s" % repo)
        return 0
    env = ensure_key(gnupg)
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    by_layout = {}
    for pkg in packages():
        by_layout.setdefault(pkg["layout"], []).append(pkg)
    for variant, (layout, left_out) in VARIANTS.items():
        by_layout[variant] = [p for p in by_layout[layout] if p["name"] != left_out]
    for layout, pkgs in sorted(by_layout.items()):
        (repo / layout).mkdir()
        sign_index(repo / layout, [build_deb(p, repo / layout) for p in pkgs], env,
                   "gpulab fake %s repository" % layout)
    nccl_tests_source(repo / "sources")
    for wheel in wheels:
        project = repo / "pypi" / wheel.name.split("-")[0].lower().replace("_", "-")
        project.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(wheel, project / wheel.name)
    (repo / "key.asc").write_text(run("gpg", "--batch", "--armor", "--export", env=env))
    (repo / ("stamp-" + digest[:16])).write_text(digest + "\n")
    with tarfile.open(out / "repo.tar", "w") as tar:
        for path in sorted(repo.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(repo)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
            if path.is_dir():
                tar.addfile(info)
                continue
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    stamp.write_text(digest)
    print("built %s" % repo)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
