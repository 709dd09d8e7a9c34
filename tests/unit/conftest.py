# -*- coding: utf-8 -*-
"""Make repo-root module_utils/ and library/ importable the way Ansible sees them:
`ansible.module_utils.gpu_parsers` and plain `import nvlink_topology`."""

import os
import sys

import ansible.module_utils

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE_UTILS = os.path.join(ROOT, 'module_utils')
LIBRARY = os.path.join(ROOT, 'library')
FIXTURES = os.path.join(ROOT, 'tests', 'fixtures')

if MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.insert(0, MODULE_UTILS)
for p in (MODULE_UTILS, LIBRARY, os.path.dirname(os.path.abspath(__file__))):
    if p not in sys.path:
        sys.path.insert(0, p)
