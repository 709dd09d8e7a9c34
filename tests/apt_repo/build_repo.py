#!/usr/bin/env python3
"""Build the test double of NVIDIA's CUDA apt repository: a signed flat repository of fake packages.

TEST ONLY. The packages carry NVIDIA's names, versions and dependency shape but no NVIDIA software:
their "binaries" are shell scripts and their systemd units run /bin/sleep. They exist so that the
node baseline roles run repository setup, key handling, pinning, holds and branch upgrades for real
through apt in Molecule and in the lab, where NVIDIA's servers cannot be reached.

Usage: build_repo.py OUT_DIR
Writes OUT_DIR/repo/ and the same as OUT_DIR/repo.tar (the flat repo: *.deb, Packages, Packages.gz, Release, Release.gpg, InRelease,
key.asc, stamp-<digest>) and OUT_DIR/gnupg/ (the throwaway signing key, generated on first run, never committed).
A second run with the same package list changes nothing (stamp file), so playbooks that copy the
repository stay idempotent.
Needs dpkg-deb and gpg on PATH; everything else is the Python standard library.
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
# branch -> exact driver package version, as NVIDIA's repository spells it.
DRIVER_BRANCHES = {"535": "535.161.08-1", "550": "550.127.05-1", "570": "570.133.20-1"}
# CUDA minor -> toolkit version, NCCL version (NVIDIA's "+cudaX.Y" suffix), cuDNN version.
CUDA_RELEASES = {
    "12.2": {"toolkit": "12.2.2-1", "nccl": "2.19.3-1+cuda12.2", "cudnn": "9.1.0.70-1"},
    "12.4": {"toolkit": "12.4.1-1", "nccl": "2.21.5-1+cuda12.4", "cudnn": "9.1.0.70-1"},
    "12.8": {"toolkit": "12.8.1-1", "nccl": "2.25.1-1+cuda12.8", "cudnn": "9.8.0.87-1"},
}
MAINTAINER = "gpulab test doubles <tests@gpulab.invalid>"
SERVICE = """[Unit]
Description={desc} (gpulab test double)

[Service]
Type=simple
ExecStart={exe}

[Install]
WantedBy=multi-user.target
"""


def script(text):
    return {"mode": 0o755, "text": "#!/bin/sh\n# gpulab test double, not NVIDIA software\n" + text}


def packages():
    """Every fake package: name, version, control fields, files."""
    pkgs = []
    for branch, ver in DRIVER_BRANCHES.items():
        upstream = ver.split("-")[0]
        pkgs += [
            {"name": "libnvidia-compute-%s" % branch, "version": ver,
             "fields": {"Provides": "libnvidia-compute", "Conflicts": "libnvidia-compute",
                        "Replaces": "libnvidia-compute"},
             "files": {"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%s" % upstream: {"text": "fake\n"}}},
            {"name": "nvidia-kernel-common-%s" % branch, "version": ver,
             "fields": {"Provides": "nvidia-kernel-common", "Conflicts": "nvidia-kernel-common",
                        "Replaces": "nvidia-kernel-common"},
             "files": {"usr/share/gpulab-fake/nvidia-kernel-%s" % upstream: {"text": upstream + "\n"}}},
            {"name": "nvidia-compute-utils-%s" % branch, "version": ver,
             "fields": {"Depends": "libnvidia-compute-%s (= %s)" % (branch, ver),
                        "Provides": "nvidia-compute-utils", "Conflicts": "nvidia-compute-utils",
                        "Replaces": "nvidia-compute-utils"},
             "files": {"usr/bin/nvidia-persistenced": script("exec /bin/sleep infinity\n"),
                       "lib/systemd/system/nvidia-persistenced.service": {"text": SERVICE.format(
                           desc="NVIDIA Persistence Daemon", exe="/usr/bin/nvidia-persistenced")}}},
            {"name": "nvidia-driver-%s" % branch, "version": ver,
             "fields": {"Depends": ", ".join("%s-%s (= %s)" % (p, branch, ver) for p in (
                 "libnvidia-compute", "nvidia-kernel-common", "nvidia-compute-utils")),
                        "Provides": "nvidia-driver-binary", "Conflicts": "nvidia-driver-binary",
                        "Replaces": "nvidia-driver-binary"},
             "files": {"usr/share/gpulab-fake/nvidia-driver-version": {"text": upstream + "\n"}}},
            {"name": "nvidia-fabricmanager-%s" % branch, "version": ver,
             "fields": {"Depends": "nvidia-driver-%s (= %s)" % (branch, ver),
                        "Provides": "nvidia-fabricmanager", "Conflicts": "nvidia-fabricmanager",
                        "Replaces": "nvidia-fabricmanager"},
             "files": {"usr/bin/nv-fabricmanager": script("exec /bin/sleep infinity\n"),
                       "lib/systemd/system/nvidia-fabricmanager.service": {"text": SERVICE.format(
                           desc="NVIDIA fabric manager service", exe="/usr/bin/nv-fabricmanager")}}},
        ]
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
             "files": {"usr/share/gpulab-fake/libnccl-dev-cuda%s" % cuda: {"text": rel["nccl"] + "\n"}}},
            {"name": "nccl-tests-cuda-%s" % dash, "version": "2.13.11-1",
             "fields": {"Depends": "libnccl2 (= %s)" % rel["nccl"],
                        "Provides": "nccl-tests", "Conflicts": "nccl-tests", "Replaces": "nccl-tests"},
             "files": {"opt/nccl-tests/bin/all_reduce_perf": script(
                 "echo '# nccl-tests test double (NCCL %s)'\n" % rel["nccl"])}},
            {"name": "libcudnn9-cuda-12", "version": "%s+cuda%s" % (rel["cudnn"], cuda), "fields": {},
             "files": {"usr/share/gpulab-fake/libcudnn9-cuda%s" % cuda: {"text": rel["cudnn"] + "\n"}}},
        ]
    pkgs.append({"name": "nvidia-container-toolkit", "version": "1.17.4-1", "fields": {},
                 "files": {"usr/bin/nvidia-container-runtime": script("exec /usr/bin/runc \"$@\"\n"),
                           "usr/bin/nvidia-ctk": script("echo 'NVIDIA Container Toolkit CLI version 1.17.4'\n")}})
    return pkgs


def run(*argv, **kw):
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, **kw).stdout


def build_deb(pkg, pool):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        (root / "DEBIAN").mkdir(parents=True)
        for rel, spec in pkg["files"].items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(spec["text"])
            path.chmod(spec.get("mode", 0o644))
        control = {"Package": pkg["name"], "Version": pkg["version"], "Architecture": ARCH,
                   "Maintainer": MAINTAINER, "Section": "multiverse/devel", "Priority": "optional"}
        control.update(pkg["fields"])
        control["Description"] = "%s (gpulab test double)\n Fake package for tests, not NVIDIA software." % pkg["name"]
        (root / "DEBIAN" / "control").write_text("".join("%s: %s\n" % kv for kv in control.items()))
        deb = pool / ("%s_%s_%s.deb" % (pkg["name"], pkg["version"].replace(":", "%3a"), ARCH))
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


def build(out):
    repo, gnupg, stamp = out / "repo", out / "gnupg", out / "stamp"
    spec = json.dumps(packages(), sort_keys=True)
    digest = hashlib.sha256((spec + Path(__file__).read_text()).encode()).hexdigest()
    if stamp.is_file() and stamp.read_text() == digest and (repo / "InRelease").is_file():
        print("unchanged %s" % repo)
        return 0
    env = ensure_key(gnupg)
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    index = "\n".join(build_deb(p, repo) for p in packages())
    (repo / "Packages").write_text(index)
    with gzip.GzipFile(repo / "Packages.gz", "wb", mtime=0) as fh:
        fh.write(index.encode())
    files = ["Packages", "Packages.gz"]
    release = ["Origin: gpulab-test-doubles", "Label: gpulab fake CUDA repository", "Architectures: %s" % ARCH,
               "Date: %s" % formatdate(usegmt=True), "Acquire-By-Hash: no"]
    for field, algo in (("MD5Sum", hashlib.md5), ("SHA256", hashlib.sha256)):
        release.append("%s:" % field)
        for name in files:
            data = (repo / name).read_bytes()
            release.append(" %s %d %s" % (algo(data).hexdigest(), len(data), name))
    (repo / "Release").write_text("\n".join(release) + "\n")
    run("gpg", "--batch", "--yes", "--clearsign", "-o", str(repo / "InRelease"), str(repo / "Release"), env=env)
    run("gpg", "--batch", "--yes", "-abs", "-o", str(repo / "Release.gpg"), str(repo / "Release"), env=env)
    (repo / "key.asc").write_text(run("gpg", "--batch", "--armor", "--export", env=env))
    (repo / ("stamp-" + digest[:16])).write_text(digest + "\n")
    with tarfile.open(out / "repo.tar", "w") as tar:
        for path in sorted(repo.iterdir()):
            info = tar.gettarinfo(str(path), arcname=path.name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    stamp.write_text(digest)
    print("built %s" % repo)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
