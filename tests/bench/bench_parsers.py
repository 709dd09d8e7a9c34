#!/usr/bin/env python
# -*- coding: utf-8 -*-
"""Benchmark (not a test): parse the 8-GPU H200 `nvidia-smi topo -m` fixture 1,000 times.

Run: .venv/bin/python tests/bench/bench_parsers.py
"""

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'unit'))

import conftest  # noqa: E402,F401  (puts module_utils on ansible.module_utils.__path__)
from ansible.module_utils.gpu_parsers import parse_topo_matrix  # noqa: E402

TARGET_S = 1.0
RUNS = 1000


def main():
    with open(os.path.join(ROOT, 'tests', 'fixtures', 'topo_h200_8gpu_12nic_nv18_distributedai.txt')) as f:
        text = f.read()
    parse_topo_matrix(text)  # warm up
    start = time.perf_counter()
    for _ in range(RUNS):
        parse_topo_matrix(text)
    elapsed = time.perf_counter() - start
    print('topology parse x%d: %.2f s (%.2fx of %.0f s target)' % (RUNS, elapsed, elapsed / TARGET_S, TARGET_S))
    return 0 if elapsed <= TARGET_S else 1


if __name__ == '__main__':
    sys.exit(main())
