# -*- coding: utf-8 -*-
"""apt_index: the package index is refreshed when an index apt needs is missing or the last refresh is
stale, never trusting the lists directory's time; and every role installs packages only through it."""

import os
import time
from pathlib import Path

import pytest
import yaml

import apt_index
from conftest import ROOT
from helpers import run_module

BINS = {'apt-get': '/usr/bin/apt-get', 'timeout': '/usr/bin/timeout'}
BOUND = ['/usr/bin/timeout', '--kill-after=10', '300']

# The shape `apt-get indextargets` prints on Debian 12 (recorded on this project's build machine, apt 2.6.1),
# with the lists directory replaced by the test's own.
RECORD = """MetaKey: main/binary-amd64/Packages
ShortDesc: Packages
Description: http://deb.debian.org/debian bookworm/main amd64 Packages
URI: http://deb.debian.org/debian/dists/bookworm/main/binary-amd64/Packages
Filename: {lists}/deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages{suffix}
Optional: no
KeepCompressed: {keep}
Codename: bookworm
CompressionTypes: xz bz2 lzma gz lz4 zst uncompressed
Created-By: Packages
Identifier: Packages
Target-Of: deb

MetaKey: main/i18n/Translation-en
ShortDesc: Translation-en
URI: http://deb.debian.org/debian/dists/bookworm/main/i18n/Translation-en
Filename: {lists}/deb.debian.org_debian_dists_bookworm_main_i18n_Translation-en
Optional: yes
Created-By: Translations
Identifier: Translations

MetaKey: main/binary-amd64/Packages
ShortDesc: Packages
URI: http://deb.debian.org/debian-security/dists/bookworm-security/main/binary-amd64/Packages
Filename: {lists}/deb.debian.org_debian-security_dists_bookworm-security_main_binary-amd64_Packages
Optional: no
Created-By: Packages
Identifier: Packages
"""
# `apt-get update --print-uris` on the same machine: every file a refresh fetches, fetched before or not.
PRINT_URIS = """'http://deb.debian.org/debian/dists/bookworm/InRelease' deb.debian.org_debian_dists_bookworm_InRelease 0 
'http://deb.debian.org/debian-security/dists/bookworm-security/InRelease' deb.debian.org_debian-security_dists_bookworm-security_InRelease 0 
'http://deb.debian.org/debian/dists/bookworm/main/binary-amd64/Packages.xz' deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages 0 
'http://deb.debian.org/debian/dists/bookworm/main/i18n/Translation-en.xz' deb.debian.org_debian_dists_bookworm_main_i18n_Translation-en 0 
'http://deb.debian.org/debian-security/dists/bookworm-security/main/binary-amd64/Packages.xz' deb.debian.org_debian-security_dists_bookworm-security_main_binary-amd64_Packages 0 
"""
RELEASES = ('deb.debian.org_debian_dists_bookworm_InRelease',
            'deb.debian.org_debian-security_dists_bookworm-security_InRelease')
MAIN = 'deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages'
SECURITY = 'deb.debian.org_debian-security_dists_bookworm-security_main_binary-amd64_Packages'


@pytest.fixture
def apt(tmp_path):
    """A lists directory as a freshly built image has it: empty, its modification time now."""
    lists = tmp_path / 'lists'
    lists.mkdir()
    os.utime(lists, None)
    stamp = tmp_path / 'periodic' / 'update-success-stamp'
    return {'lists': lists, 'stamp': stamp, 'args': {'lists_dir': str(lists), 'stamp': str(stamp)}}


def fetched(apt, *names):
    for name in names:
        (apt['lists'] / name).write_text('Package: x\n')


def apt_argv(argv):
    """The apt-get command line, without the coreutils timeout the refresh runs under."""
    return argv[argv.index('/usr/bin/apt-get'):]


def responses(apt, update=(0, 'Reading package lists...', ''), fills=RELEASES + (MAIN, SECURITY), suffix='',
              keep='no', print_uris=PRINT_URIS):
    """apt as it answers: indextargets lists only the package indexes of releases already fetched."""
    def indextargets(argv):
        text = RECORD.format(lists=apt['lists'], suffix=suffix, keep=keep)
        stanzas = text.split('\n\n')
        known = [st for st in stanzas if ('bookworm-security' in st and (apt['lists'] / RELEASES[1]).exists())
                 or ('bookworm-security' not in st and (apt['lists'] / RELEASES[0]).exists())]
        return 0, '\n\n'.join(known), ''

    answers = list(update) if isinstance(update, list) else None

    def do_update(argv):
        answer = answers.pop(0) if answers is not None else update
        if answer[0] == 0:
            fetched(apt, *fills)
        return answer

    return {
        lambda argv: apt_argv(argv)[1] == 'indextargets': indextargets,
        lambda argv: apt_argv(argv)[1:3] == ['update', '--print-uris']: (0, print_uris, ''),
        lambda argv: apt_argv(argv)[1] == 'update': do_update,
    }


def updates(runner):
    return [c for c in runner.calls if apt_argv(c)[1] == 'update' and '--print-uris' not in c]


def test_emptied_lists_with_a_fresh_directory_time_are_refreshed(apt):
    result, failed, runner = run_module(apt_index.main, apt['args'], responses(apt), bins=BINS)
    assert not failed, result
    assert result['updated'] is True and result['changed'] is False
    # apt-get indextargets lists nothing before the first refresh: the release files are what is missing
    assert result['reason'] == '2 of 2 indexes missing from %s' % apt['lists']
    assert updates(runner) == [BOUND + ['/usr/bin/apt-get', 'update', '-q', '-o',
                                        'Dir::State::Lists=%s' % apt['lists']]]
    assert all(t['present'] for t in result['targets']) and len(result['targets']) == 4
    assert apt['stamp'].exists()  # the next call knows when this refresh happened


def test_present_and_recent_is_left_alone(apt):
    fetched(apt, *RELEASES, MAIN, SECURITY)
    apt['stamp'].parent.mkdir()
    apt['stamp'].write_text('')
    result, failed, runner = run_module(apt_index.main, apt['args'], responses(apt), bins=BINS)
    assert not failed and result['updated'] is False and updates(runner) == []
    assert result['age_seconds'] <= 5 and result['reason'].startswith('every package index present')


def test_stale_or_unrecorded_refresh_is_refreshed(apt):
    fetched(apt, *RELEASES, MAIN, SECURITY)
    result, failed, runner = run_module(apt_index.main, apt['args'], responses(apt), bins=BINS)
    assert result['updated'] and result['reason'].startswith('no successful refresh recorded'), result
    old = time.time() - 7200
    os.utime(apt['stamp'], (old, old))
    result, failed, runner = run_module(apt_index.main, apt['args'], responses(apt), bins=BINS)
    assert result['updated'] and result['reason'].startswith('last refreshed 7'), result
    result, failed, runner = run_module(apt_index.main, dict(apt['args'], max_age=0), responses(apt), bins=BINS)
    assert result['updated'] and 'more than max_age 0 s' in result['reason'], result


def test_one_missing_index_is_enough_to_refresh(apt):
    fetched(apt, *RELEASES, MAIN)
    apt['stamp'].parent.mkdir()
    apt['stamp'].write_text('')
    result, failed, runner = run_module(apt_index.main, apt['args'], responses(apt), bins=BINS)
    assert result['updated'] and result['reason'].startswith('1 of 4 indexes missing'), result


def test_a_compressed_index_counts_as_present(apt):
    (apt['lists'] / (MAIN + '.lz4')).write_bytes(b'\x04\x22\x4d\x18')
    fetched(apt, *RELEASES, SECURITY)
    apt['stamp'].parent.mkdir()
    apt['stamp'].write_text('')
    for suffix in ('', '.lz4'):
        result, failed, runner = run_module(apt_index.main, apt['args'], responses(apt, suffix=suffix, keep='yes'),
                                            bins=BINS)
        assert not failed and result['updated'] is False, (suffix, result)


def test_an_empty_index_file_is_missing(apt):
    fetched(apt, *RELEASES, SECURITY)
    (apt['lists'] / MAIN).write_text('')
    apt['stamp'].parent.mkdir()
    apt['stamp'].write_text('')
    result, failed, runner = run_module(apt_index.main, apt['args'], responses(apt), bins=BINS)
    assert result['updated'] and result['reason'].startswith('1 of 4'), result


def test_an_index_still_missing_after_the_refresh_fails_naming_it(apt):
    result, failed, runner = run_module(
        apt_index.main, apt['args'],
        responses(apt, update=(0, '', 'W: Failed to fetch http://deb.debian.org/debian-security/dists/'
                                      'bookworm-security/InRelease  Temporary failure resolving'),
                  fills=(RELEASES[0], MAIN)),
        bins=BINS)
    assert failed
    assert 'left these indexes missing: http://deb.debian.org/debian-security/dists/bookworm-security/InRelease' \
           in result['msg']
    assert 'Temporary failure resolving' in result['msg']
    assert not apt['stamp'].exists()


def test_a_failed_refresh_fails_with_apts_message(apt):
    result, failed, runner = run_module(
        apt_index.main, apt['args'], responses(apt, update=(100, '', 'E: The repository is not signed.')),
        bins=BINS)
    assert failed and result['msg'].startswith('apt-get update exited 100') and 'is not signed' in result['msg']


def test_a_refresh_that_stalls_is_tried_once_more(apt):
    """apt-cacher-ng 3.7 can accept a request for a release file several clients refresh at once and never
    answer it (recorded in this project's CI); apt then waits forever, holding its lock. The refresh runs
    under a time limit, and a second try gets through."""
    result, failed, runner = run_module(
        apt_index.main, apt['args'], responses(apt, update=[(124, '', ''), (0, 'Reading package lists...', '')]),
        bins=BINS)
    assert not failed and result['updated'] is True, result
    assert len(updates(runner)) == 2 and all(c[:3] == BOUND for c in updates(runner))


def test_a_refresh_that_stalls_twice_fails_naming_the_limit(apt):
    result, failed, runner = run_module(
        apt_index.main, dict(apt['args'], update_timeout=45),
        responses(apt, update=[(124, '', 'Get:1 http://deb.debian.org/debian bookworm InRelease'), (124, '', '')]),
        bins=BINS)
    assert failed and len(updates(runner)) == 2
    assert result['msg'].startswith('apt-get update did not finish within update_timeout 45 s, twice'), result
    assert not apt['stamp'].exists()


def test_no_time_limit_runs_apt_get_alone(apt):
    result, failed, runner = run_module(apt_index.main, dict(apt['args'], update_timeout=0), responses(apt),
                                        bins={'apt-get': '/usr/bin/apt-get'})
    assert not failed and updates(runner)[0][0] == '/usr/bin/apt-get'


def test_negative_update_timeout_is_refused(apt):
    result, failed, runner = run_module(apt_index.main, dict(apt['args'], update_timeout=-5), responses(apt),
                                        bins=BINS)
    assert failed and 'update_timeout must be 0 or more' in result['msg'] and runner.calls == []


def test_no_source_at_all_fails(apt):
    result, failed, runner = run_module(
        apt_index.main, apt['args'], responses(apt, print_uris=''), bins=BINS)
    assert failed and 'apt has no source to refresh' in result['msg'] and updates(runner) == []


def test_negative_max_age_is_refused(apt):
    result, failed, runner = run_module(apt_index.main, dict(apt['args'], max_age=-1), responses(apt), bins=BINS)
    assert failed and 'max_age must be 0 or more' in result['msg'] and runner.calls == []


def test_check_mode_refreshes_too(apt):
    """A dry run on a fresh host must resolve packages as the real run will; the index is no configuration."""
    result, failed, runner = run_module(apt_index.main, apt['args'], responses(apt), bins=BINS, check_mode=True)
    assert not failed and result['updated'] is True and result['changed'] is False


# Every task file of every role, and every task in it (blocks included).
def _tasks(items):
    for task in items or []:
        yield task
        for key in ('block', 'rescue', 'always'):
            yield from _tasks(task.get(key))


APT_MODULES = {'ansible.builtin.apt', 'apt', 'ansible.builtin.package', 'package'}
ROLE_TASKS = {p: list(_tasks(yaml.safe_load(p.read_text())))
              for p in sorted(Path(ROOT, 'roles').glob('*/tasks/*.yml'))}


def test_no_role_trusts_the_lists_directory_time():
    """cache_valid_time judges the index by the lists directory's time, which a freshly built image with
    emptied lists makes look new; update_cache beside an install is a second way to do what apt_index does."""
    offenders = ['%s: %s' % (p.relative_to(ROOT), t.get('name'))
                 for p, tasks in ROLE_TASKS.items() for t in tasks
                 for m in APT_MODULES & set(t)
                 if isinstance(t[m], dict) and ({'cache_valid_time', 'update_cache'} & set(t[m]))]
    assert offenders == []


def test_every_role_that_installs_packages_refreshes_through_apt_index():
    roles = {}
    for p, tasks in ROLE_TASKS.items():
        role = p.parts[-3]
        for t in tasks:
            installs = any(isinstance(t.get(m), dict) and t[m].get('name') and t[m].get('state', 'present') == 'present'
                           for m in APT_MODULES)
            roles.setdefault(role, {'installs': False, 'index': False})
            roles[role]['installs'] |= installs
            roles[role]['index'] |= 'apt_index' in t
    installing = sorted(r for r, v in roles.items() if v['installs'])
    assert len(installing) >= 9, installing  # the baseline, RDMA, monitoring and LB roles at least
    assert [r for r in installing if not roles[r]['index']] == []


def test_a_source_added_since_the_last_refresh_is_fetched(apt):
    """indextargets knows nothing of a source whose release was never fetched; --print-uris names it."""
    fetched(apt, *RELEASES, MAIN, SECURITY)
    apt['stamp'].parent.mkdir()
    apt['stamp'].write_text('')
    cuda = ("'http://127.0.0.1:8765/./InRelease' 127.0.0.1:8765_._InRelease 0 \n"
            "'http://127.0.0.1:8765/./Packages.xz' 127.0.0.1:8765_._Packages 0 \n")
    result, failed, runner = run_module(apt_index.main, apt['args'],
                                        responses(apt, print_uris=cuda + PRINT_URIS,
                                                  fills=('127.0.0.1:8765_._InRelease',)), bins=BINS)
    assert not failed and result['updated'] and result['reason'].startswith('1 of 5 indexes missing'), result


def test_a_repository_without_inrelease_counts_by_its_release_file(apt):
    fetched(apt, RELEASES[0].replace('InRelease', 'Release'), RELEASES[1], MAIN, SECURITY)
    apt['stamp'].parent.mkdir()
    apt['stamp'].write_text('')
    result, failed, runner = run_module(apt_index.main, apt['args'], responses(apt), bins=BINS)
    release = result['targets'][0]
    assert release['uri'] == 'http://deb.debian.org/debian/dists/bookworm/InRelease' and release['present'], result
