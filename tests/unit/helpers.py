# -*- coding: utf-8 -*-
"""Shared test helpers: fixture loading, capture-section extraction, module runner."""

import json
import os
from unittest import mock

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from conftest import FIXTURES


def fixture(name):
    with open(os.path.join(FIXTURES, name), 'r', encoding='utf-8') as f:
        return f.read()


def capture_section(name, command):
    """Body of the `# $ <command>` section of a nvidia_gpu_exporter capture file.
    `command` may be a prefix (for the long --query-gpu lines)."""
    lines = fixture(os.path.join('nvidia_gpu_exporter_captures', name)).splitlines(True)
    for i, line in enumerate(lines):
        if line.startswith('# $ ') and line[4:].strip().startswith(command):
            j = i + 1
            if j < len(lines) and lines[j].startswith('####'):
                j += 1
            k = j
            while k < len(lines) and not lines[k].startswith('################'):
                k += 1
            return ''.join(lines[j:k])
    raise KeyError('no section %r in %s' % (command, name))


class ModuleExit(Exception):
    def __init__(self, result, failed):
        super().__init__(result.get('msg', ''))
        self.result = result
        self.failed = failed


def _exit_json(self, **kwargs):
    kwargs.setdefault('changed', False)
    raise ModuleExit(json.loads(json.dumps(kwargs, default=str)), False)


def _fail_json(self, msg, **kwargs):
    kwargs['msg'] = msg
    kwargs['failed'] = True
    raise ModuleExit(json.loads(json.dumps(kwargs, default=str)), True)


class FakeRunner:
    """Answers run_command by argv: `responses` maps a key (tuple of argv[1:], or a callable
    predicate) to (rc, stdout, stderr). Records every argv."""

    def __init__(self, responses):
        self.responses = responses
        self.calls = []

    def __call__(self, module_self, args, **kwargs):
        assert isinstance(args, list), 'run_command must get an argv list, got %r' % (args,)
        self.calls.append(list(args))
        key = tuple(args[1:])
        if key in self.responses:
            r = self.responses[key]
            return r(args) if callable(r) else r
        for k, r in self.responses.items():
            if callable(k) and k(args):
                return r(args) if callable(r) else r
        raise AssertionError('unexpected command %r' % (args,))


def run_module(main, args, responses, bins=None, check_mode=False):
    """Run a module's main() with args; returns (result, failed, runner)."""
    bins = bins if bins is not None else {'nvidia-smi': '/usr/bin/nvidia-smi', 'dmesg': '/usr/bin/dmesg'}
    runner = FakeRunner(responses)
    if check_mode:
        args = dict(args, _ansible_check_mode=True)

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        if arg in bins:
            return bins[arg]
        if required:
            self.fail_json(msg='Failed to find required executable "%s"' % arg)
        return None

    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', _exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', _fail_json), \
            mock.patch.object(basic.AnsibleModule, 'run_command',
                              lambda self, args, **kw: runner(self, args, **kw)), \
            mock.patch.object(basic.AnsibleModule, 'get_bin_path', get_bin_path):
        with pytest.raises(ModuleExit) as exc:
            main()
    if 'checks' in exc.value.result or 'verdict' in exc.value.result:
        assert_result_format(exc.value.result, exc.value.failed)
    return exc.value.result, exc.value.failed, runner


CHECK_KEYS = {'name', 'subject', 'status', 'measured', 'expected', 'reason'}


def assert_result_format(result, failed):
    """The one result format (docs/DESIGN.md): every module test checks it on every result it gets."""
    checks = result['checks']
    assert isinstance(checks, list), checks
    for c in checks:
        assert set(c) == CHECK_KEYS, c
        assert c['status'] in ('ok', 'warn', 'fail') and isinstance(c['reason'], str) and c['reason'], c
        assert isinstance(c['name'], str) and isinstance(c['subject'], str) and c['subject'], c
    statuses = [c['status'] for c in checks]
    worst = 'fail' if 'fail' in statuses or not checks else 'warn' if 'warn' in statuses else 'ok'
    assert result['verdict'] == worst, (result['verdict'], statuses)
    if result['verdict'] == 'fail' and not failed:
        # only redfish_power, which sets a cap, returns its failed readings without failing
        assert 'cooling' in result, result
