# -*- coding: utf-8 -*-
"""Make repo-root module_utils/ and library/ importable the way Ansible sees them:
`ansible.module_utils.gpu_parsers` and plain `import nvlink_topology`."""

import os
import subprocess
import sys

import ansible.module_utils
import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE_UTILS = os.path.join(ROOT, 'module_utils')
LIBRARY = os.path.join(ROOT, 'library')
FIXTURES = os.path.join(ROOT, 'tests', 'fixtures')
set_hypothesis_home_dir(os.path.join(ROOT, '.cache', 'hypothesis'))

# Property tests draw the same examples every run (no example database, no clock-based deadline): a failure
# in CI is one a developer reproduces by running the test again.
settings.register_profile("gpulab", database=None, derandomize=True, deadline=None)
settings.load_profile("gpulab")

if MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.insert(0, MODULE_UTILS)
for p in (MODULE_UTILS, LIBRARY, os.path.dirname(os.path.abspath(__file__))):
    if p not in sys.path:
        sys.path.insert(0, p)


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    """A self-signed certificate and key for 127.0.0.1, for the lab Redfish BMC over HTTPS: (crt, key)."""
    tmp = tmp_path_factory.mktemp("cert")
    crt, key = tmp / "bmc.crt", tmp / "bmc.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
    return str(crt), str(key)
