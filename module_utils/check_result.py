# -*- coding: utf-8 -*-
# Copyright: contributors to this toolkit
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one result format of every check module (docs/DESIGN.md, "Check results").

A module returns `checks`, a list of {name, subject, status, measured, expected, reason}, and `verdict`,
the worst status among them. No check at all is a `fail`: a verifier that looked at nothing proved nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

STATUSES = ('ok', 'warn', 'fail')
_RANK = dict((s, i) for i, s in enumerate(STATUSES))


def check(name, subject, status, measured=None, expected=None, reason=''):
    if status not in _RANK:
        status, reason = 'fail', 'unknown status %r: %s' % (status, reason)
    return {'name': name, 'subject': subject, 'status': status, 'measured': measured, 'expected': expected,
            'reason': reason}


def verdict(checks):
    if not checks:
        return 'fail'
    return max((c['status'] for c in checks), key=lambda s: _RANK.get(s, 2))


def from_mismatches(mismatches, evaluated, subject='node'):
    """Checks from a list of mismatches {item, check, expected, found}: one fail per mismatch and, for every
    name in `evaluated` that has no mismatch, one ok for the subject as a whole."""
    out = [check(m['check'], m['item'], 'fail', m.get('found'), m.get('expected'),
                 'expected %s, found %s' % (m.get('expected'), m.get('found'))) for m in mismatches]
    failed = set(m['check'].split('.')[0] for m in mismatches)
    for name, expected in evaluated:
        if name not in failed:
            out.append(check(name, subject, 'ok', expected, expected, 'as expected'))
    return out


def from_severity_map(subject, checks, expected=None):
    """{name: {severity, message, value}} (the health evaluators' shape) -> checks for one subject."""
    expected = expected or {}
    return [check(name, subject, c.get('severity', 'fail'), c.get('value'), expected.get(name),
                  c.get('message', '')) for name, c in checks.items()]
