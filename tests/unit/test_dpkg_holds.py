# -*- coding: utf-8 -*-
"""dpkg_holds: one read and at most one write for a whole package set; only what differs changes; a package
dpkg does not know is refused before anything changes; check and diff mode."""

import dpkg_holds
from helpers import run_module

BINS = {'dpkg': '/usr/bin/dpkg'}
# `dpkg --get-selections dpkg nosuchpkg libc6` on this project's build machine (Debian 12, dpkg 1.21): tabs,
# the architecture qualifier on a Multi-Arch: same package, and the unknown name on stderr with rc 0.
RECORDED = ('dpkg\t\t\t\t\t\tinstall\nlibc6:amd64\t\t\t\t\tinstall\n', 'dpkg: no packages found matching nosuchpkg\n')


def _get(selections):
    out = ''.join('%s\t\t\t%s\n' % kv for kv in selections.items())
    return lambda argv: (0, out, ''.join('dpkg: no packages found matching %s\n' % n for n in argv[2:]
                                         if n.split(':')[0] not in [k.split(':')[0] for k in selections]))


def _responses(selections, writes):
    def set_selections(argv):
        writes.append(argv)
        return 0, '', ''
    return {lambda a: a[1] == '--get-selections': _get(selections),
            ('--set-selections',): set_selections}


def test_parse_recorded_output():
    assert dpkg_holds.parse_selections(RECORDED[0]) == {'dpkg': 'install', 'libc6': 'install'}


def test_only_the_packages_that_differ_are_set_in_one_call():
    writes = []
    result, failed, runner = run_module(
        dpkg_holds.main, {'names': ['nvidia-utils-570', 'libnvidia-compute-570:amd64', 'nvidia-driver-570']},
        _responses({'nvidia-utils-570': 'hold', 'libnvidia-compute-570:amd64': 'install',
                    'nvidia-driver-570': 'install'}, writes), bins=BINS)
    assert not failed and result['changed']
    assert result['changed_packages'] == ['libnvidia-compute-570:amd64', 'nvidia-driver-570'], result
    assert len([c for c in runner.calls if c[1] == '--get-selections']) == 1
    assert len(writes) == 1
    assert result['before']['nvidia-utils-570'] == 'hold'


def test_a_converged_set_changes_nothing():
    writes = []
    result, failed, _ = run_module(dpkg_holds.main, {'names': ['a', 'b'], 'selection': 'hold'},
                                   _responses({'a': 'hold', 'b': 'hold'}, writes), bins=BINS)
    assert not failed and not result['changed'] and writes == []


def test_release_sets_install():
    writes = []
    result, failed, runner = run_module(dpkg_holds.main, {'names': ['a', 'b'], 'selection': 'install'},
                                        _responses({'a': 'hold', 'b': 'install'}, writes), bins=BINS)
    assert not failed and result['changed_packages'] == ['a'] and result['before'] == {'a': 'hold', 'b': 'install'}


def test_an_unknown_package_is_refused_before_any_change():
    writes = []
    result, failed, _ = run_module(dpkg_holds.main, {'names': ['a', 'nvidia-utlis-570']},
                                   _responses({'a': 'install'}, writes), bins=BINS)
    assert failed and 'nvidia-utlis-570' in result['msg'] and writes == []


def test_check_mode_reports_and_writes_nothing_with_a_diff():
    writes = []
    result, failed, _ = run_module(dpkg_holds.main, {'names': ['a', 'b'], '_ansible_diff': True},
                                   _responses({'a': 'install', 'b': 'hold'}, writes), bins=BINS, check_mode=True)
    assert not failed and result['changed'] and writes == []
    assert result['changed_packages'] == ['a']
    assert result['diff'] == {'before': 'a\tinstall\n', 'after': 'a\thold\n'}


def test_a_failing_dpkg_fails_with_its_message():
    result, failed, _ = run_module(dpkg_holds.main, {'names': ['a']},
                                   {lambda a: True: (2, '', 'dpkg: error: cannot access archive')}, bins=BINS)
    assert failed and 'cannot access archive' in result['msg']
