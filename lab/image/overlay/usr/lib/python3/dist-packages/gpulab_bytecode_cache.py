"""LAB ONLY (lab/image/fresh.sh puts it in lab node images, loaded by gpulab-bytecode-cache.pth).

Every Ansible task runs its module from a zip of Python sources (AnsiballZ) that Python's zipimport compiles
again each time: about 60 % of a module's CPU time on a node, and most of the lab's CPU. This keeps the
compiled code of each source, keyed by its SHA-256, under /var/cache/gpulab-bytecode, and gives it back with
the file name of this run. The code Python runs is exactly what it would have compiled; a real node simply
compiles it each time. Any error here falls back to compiling."""

import hashlib
import marshal
import os
import sys
import zipimport

_DIR = "/var/cache/gpulab-bytecode"
_compile = zipimport._compile_source
_CODE = type(_compile.__code__)


def _named(code, filename):
    consts = tuple(_named(c, filename) if isinstance(c, _CODE) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _compile_source(pathname, source):
    path = os.path.join(_DIR, "%s.%s" % (hashlib.sha256(source).hexdigest(), sys.implementation.cache_tag))
    try:
        with open(path, "rb") as fh:
            return _named(marshal.load(fh), pathname)
    except Exception:  # noqa: BLE001 - a missing or unreadable entry is compiled afresh
        pass
    code = _compile(pathname, source)
    try:
        os.makedirs(_DIR, mode=0o700, exist_ok=True)
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "wb") as fh:
            marshal.dump(code, fh)
        os.replace(tmp, path)
    except Exception:  # noqa: BLE001 - caching is only an optimisation
        pass
    return code


if os.geteuid() == 0:
    zipimport._compile_source = _compile_source
