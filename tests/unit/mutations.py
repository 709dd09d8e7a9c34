# -*- coding: utf-8 -*-
"""Hypothesis strategies that damage real recorded tool outputs the way real machines do.

A mutation is applied to the text of a fixture in tests/fixtures: truncation, a duplicated, dropped or
swapped line, two cells of a row swapped, a number replaced by N/A or garbage, CRLF line ends, and bytes
that are not UTF-8 (as AnsibleModule.run_command hands them over: surrogate escapes). Each strategy draws
(name, description, mutated text); the description says what changed, for the failure message."""

import re

from hypothesis import strategies as st

NUMBER_RE = re.compile(r'(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])')
# What tools print where a number belongs when something is wrong, and numbers no GPU can have.
NOT_NUMBERS = ('N/A', '[N/A]', 'ERR!', '[Unknown Error]', 'nan', 'inf', '-', '', 'Unknown', 'garbage',
               '0x1F', '1e309', '12,5', '\udcff')
ABSURD = ('-1', '-40', '99999999', '1e6', '184467440737095516150')
# Undecodable output: Python's surrogateescape form of the bytes 0xff 0xfe 0x80.
NON_UTF8 = '\udcff\udcfe\udc80'


def _lines(text):
    return text.splitlines(True)


@st.composite
def truncated(draw, text):
    cut = draw(st.integers(min_value=0, max_value=max(len(text) - 1, 0)))
    return 'truncate', 'cut at character %d of %d' % (cut, len(text)), text[:cut]


@st.composite
def line_edit(draw, text):
    lines = _lines(text)
    if len(lines) < 2:
        return 'none', 'too short', text
    i = draw(st.integers(0, len(lines) - 1))
    how = draw(st.sampled_from(('duplicate', 'drop', 'swap')))
    if how == 'duplicate':
        lines.insert(i, lines[i])
    elif how == 'drop':
        del lines[i]
    else:
        j = draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
    return how + '_line', '%s line %d (%r)' % (how, i + 1, _lines(text)[i][:80]), ''.join(lines)


@st.composite
def cell_swap(draw, text):
    lines = _lines(text)
    candidates = [n for n, line in enumerate(lines) if len(line.split()) >= 2]
    if not candidates:
        return 'none', 'no row with cells', text
    n = draw(st.sampled_from(candidates))
    cells = re.split(r'(\s+)', lines[n])
    idx = [k for k, c in enumerate(cells) if c.strip()]
    a, b = draw(st.sampled_from(idx)), draw(st.sampled_from(idx))
    cells[a], cells[b] = cells[b], cells[a]
    lines[n] = ''.join(cells)
    return 'swap_cells', 'swap cells %d and %d of line %d' % (a, b, n + 1), ''.join(lines)


@st.composite
def number_replaced(draw, text):
    matches = list(NUMBER_RE.finditer(text))
    if not matches:
        return 'none', 'no number', text
    m = draw(st.sampled_from(matches))
    new = draw(st.sampled_from(NOT_NUMBERS + ABSURD))
    line = text.count('\n', 0, m.start()) + 1
    return ('replace_number', 'line %d: %r -> %r' % (line, m.group(0), new),
            text[:m.start()] + new + text[m.end():])


def line_ends(text):
    return st.just(('crlf', 'CRLF line ends', text.replace('\n', '\r\n')))


@st.composite
def undecodable(draw, text):
    at = draw(st.integers(0, len(text)))
    return 'non_utf8', 'undecodable bytes at %d' % at, text[:at] + NON_UTF8 + text[at:]


def mutations(text):
    """Any one mutation of text."""
    return st.one_of(truncated(text), line_edit(text), cell_swap(text), number_replaced(text),
                     line_ends(text), undecodable(text))


def mutated_fixture(texts):
    """(fixture name, mutation name, description, text) for a mutation of one of texts {name: text}."""
    names = sorted(texts)
    return st.sampled_from(names).flatmap(
        lambda name: mutations(texts[name]).map(lambda m: (name,) + m))
