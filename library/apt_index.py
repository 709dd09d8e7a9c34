#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: apt_index
short_description: Make sure apt's package index knows every configured source before packages are installed
description:
  - The one way every role of this toolkit refreshes apt's package index before it installs packages.
  - Asks apt which release file each configured source needs (C(apt-get update --print-uris), which names
    them whether or not they were ever fetched) and which package indexes the fetched releases need
    (C(apt-get indextargets)), and refreshes the index with C(apt-get update) when any of them is missing
    from the lists directory, or when the last successful refresh is older than O(max_age) seconds. A
    source added since the last refresh is a missing release file, so it is fetched before packages from it
    are installed.
  - The age of the index is read from the stamp of the last successful refresh
    (C(/var/lib/apt/periodic/update-success-stamp), which Ubuntu's apt hook and this module touch), never
    from the lists directory's modification time. An image built with emptied lists has a lists directory
    that looks fresh although it holds nothing; C(ansible.builtin.apt)'s C(cache_valid_time) trusts that
    time and then cannot resolve a single package.
  - After a refresh every required index must be present; one that is still missing (an unreachable
    mirror, a wrong suite) fails the task naming its URI and apt's message.
  - The index is a cache, not configuration. A refresh is reported in RV(updated), never as a change, so a
    converged host stays at C(changed=0), and it also runs in check mode, because a dry run on a fresh host
    must resolve packages the way the real run will.
version_added: "1.1.0"
author:
  - GPU cluster toolkit maintainers
options:
  max_age:
    description:
      - Refresh when the last successful refresh is older than this many seconds.
      - V(0) refreshes on every call.
    type: int
    default: 3600
  lists_dir:
    description: apt's lists directory (C(Dir::State::Lists)).
    type: path
    default: /var/lib/apt/lists
  stamp:
    description: File whose modification time records the last successful refresh.
    type: path
    default: /var/lib/apt/periodic/update-success-stamp
  update_timeout:
    description:
      - Most seconds one C(apt-get update) may take (run under coreutils C(timeout)). A mirror or caching
        proxy that accepts the connection and then never answers otherwise holds the play, and apt's lock,
        forever; one that ran out of time is tried once more, then the task fails naming the limit.
      - V(0) waits as long as apt does.
    type: int
    default: 300
    version_added: "1.4.0"
notes:
  - Supports check mode (the refresh runs in it too; see the description).
requirements:
  - apt-get (Debian, Ubuntu)
  - timeout (coreutils) when O(update_timeout) is above 0
seealso:
  - module: ansible.builtin.apt
'''

EXAMPLES = r'''
- name: Make sure the package index knows the packages
  apt_index:

- name: Refresh when older than ten minutes
  apt_index:
    max_age: 600
'''

RETURN = r'''
updated:
  description: Whether the index was refreshed by this call.
  returned: always
  type: bool
  sample: true
reason:
  description: Why the index was refreshed, or why it was left as it was.
  returned: always
  type: str
  sample: "4 of 4 indexes missing from /var/lib/apt/lists"
age_seconds:
  description: Age of the last successful refresh before this call, in seconds; null when none is recorded.
  returned: always
  type: int
  sample: 120
targets:
  description: The release files and package indexes apt's sources need, each with its URI, file and whether
    it is present.
  returned: always
  type: list
  elements: dict
  sample:
    - uri: http://deb.debian.org/debian/dists/bookworm/main/binary-amd64/Packages
      filename: /var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages
      present: true
'''

import os
import time

from ansible.module_utils.basic import AnsibleModule

# apt may keep an index compressed (Acquire::GzipIndexes, KeepCompressed) under any of these suffixes.
_COMPRESSED = ('.lz4', '.zst', '.gz', '.xz', '.bz2', '.lzma')


def parse_indextargets(text):
    """The records of `apt-get indextargets` (deb822 stanzas) as dicts of field -> value."""
    records, current = [], {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                records.append(current)
            current = {}
        elif line[0] in ' \t':
            continue  # continuation lines carry nothing this module reads
        elif ':' in line:
            key, value = line.split(':', 1)
            current[key.strip()] = value.strip()
    if current:
        records.append(current)
    return records


def package_targets(records):
    """The non-optional package indexes: what `apt-get install` needs to resolve packages."""
    return [r for r in records
            if r.get('Identifier') == 'Packages' and r.get('Optional', 'no').lower() != 'yes']


def index_present(filename):
    base = filename
    for suffix in _COMPRESSED:
        if base.endswith(suffix):
            base = base[:-len(suffix)]
            break
    return any(os.path.isfile(base + s) and os.path.getsize(base + s) > 0 for s in ('',) + _COMPRESSED)


def parse_print_uris(text):
    """(URI, file name in the lists directory) of each release file `apt-get update --print-uris` would fetch."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith("'") and parts[1].endswith('InRelease'):
            out.append((parts[0].strip("'"), parts[1]))
    return out


def read_targets(module, apt_get, lists_dir):
    """Every index apt needs, with whether it is present: the release file of each configured source
    (`apt-get update --print-uris` names them whether or not they were ever fetched), then the package
    indexes of the fetched releases (`apt-get indextargets` lists only those)."""
    lists_opt = ['-o', 'Dir::State::Lists=%s' % lists_dir]
    rc, out, err = module.run_command([apt_get, 'update', '--print-uris', '-q'] + lists_opt)
    if rc != 0:
        module.fail_json(msg='apt-get update --print-uris exited %d: %s' % (rc, (err or out).strip()[-2000:]))
    targets = []
    for uri, name in parse_print_uris(out):
        path = os.path.join(lists_dir, name)
        # A repository without InRelease is kept as Release (+ Release.gpg).
        present = index_present(path) or index_present(path[:-len('InRelease')] + 'Release')
        targets.append({'uri': uri, 'filename': path, 'present': present})
    rc, out, err = module.run_command([apt_get, 'indextargets'] + lists_opt)
    if rc != 0:
        module.fail_json(msg='apt-get indextargets exited %d: %s' % (rc, (err or out).strip()[-2000:]))
    for rec in package_targets(parse_indextargets(out)):
        filename = rec.get('Filename')
        if not filename:
            module.fail_json(msg='apt-get indextargets gave a package index without a Filename: %r' % rec)
        targets.append({'uri': rec.get('URI', ''), 'filename': filename, 'present': index_present(filename)})
    return targets


def touch(path):
    parent = os.path.dirname(path)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent, 0o755)
    with open(path, 'a'):
        pass
    os.utime(path, None)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            max_age=dict(type='int', default=3600),
            lists_dir=dict(type='path', default='/var/lib/apt/lists'),
            stamp=dict(type='path', default='/var/lib/apt/periodic/update-success-stamp'),
            update_timeout=dict(type='int', default=300),
        ),
        supports_check_mode=True,
    )
    max_age, lists_dir, stamp = module.params['max_age'], module.params['lists_dir'], module.params['stamp']
    update_timeout = module.params['update_timeout']
    if max_age < 0:
        module.fail_json(msg='max_age must be 0 or more seconds, got %d' % max_age)
    if update_timeout < 0:
        module.fail_json(msg='update_timeout must be 0 or more seconds, got %d' % update_timeout)
    apt_get = module.get_bin_path('apt-get', required=True)
    # coreutils timeout exits 124 when the limit ran out (and kills apt-get 10 s after asking it to stop).
    bound = [module.get_bin_path('timeout', required=True), '--kill-after=10', str(update_timeout)] \
        if update_timeout else []

    targets = read_targets(module, apt_get, lists_dir)
    if not targets:
        module.fail_json(msg='apt has no source to refresh: /etc/apt/sources.list and /etc/apt/sources.list.d/ '
                             'give none (apt-get update --print-uris named no release file)', targets=targets)
    age = int(time.time() - os.stat(stamp).st_mtime) if os.path.exists(stamp) else None
    missing = [t for t in targets if not t['present']]
    if missing:
        reason = '%d of %d indexes missing from %s' % (len(missing), len(targets), lists_dir)
    elif age is None:
        reason = 'no successful refresh recorded (%s)' % stamp
    elif max_age == 0 or age > max_age:
        reason = 'last refreshed %d s ago, more than max_age %d s' % (age, max_age)
    else:
        module.exit_json(changed=False, updated=False, age_seconds=age, targets=targets,
                         reason='every package index present, refreshed %d s ago' % age)

    update = bound + [apt_get, 'update', '-q', '-o', 'Dir::State::Lists=%s' % lists_dir]
    env = {'DEBIAN_FRONTEND': 'noninteractive', 'LC_ALL': 'C'}
    rc, out, err = module.run_command(update, environ_update=env)
    timed_out = bool(bound) and rc in (124, 137)
    if timed_out:  # a stalled connection is usually gone on the next try
        rc, out, err = module.run_command(update, environ_update=env)
        timed_out = rc in (124, 137)
    if timed_out:
        module.fail_json(msg='apt-get update did not finish within update_timeout %d s, twice: a mirror or proxy '
                             'stopped answering: %s' % (update_timeout, (err or out).strip()[-2000:]),
                         reason=reason, age_seconds=age, targets=read_targets(module, apt_get, lists_dir))
    after = read_targets(module, apt_get, lists_dir)
    still_missing = [t['uri'] for t in after if not t['present']]
    if rc != 0 or still_missing:
        module.fail_json(msg='apt-get update exited %d%s: %s' % (
            rc, ' and left these indexes missing: %s' % ', '.join(still_missing) if still_missing else '',
            (err or out).strip()[-2000:]), targets=after, reason=reason, age_seconds=age)
    touch(stamp)
    module.exit_json(changed=False, updated=True, age_seconds=age, targets=after, reason=reason)


if __name__ == '__main__':
    main()
