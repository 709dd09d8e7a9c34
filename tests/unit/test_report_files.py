# -*- coding: utf-8 -*-
"""report_files: a set of reports written in one run, only what changed, atomically; or uploaded to a real
local HTTP server, failing on the first answer that is not 2xx, naming it."""

import http.server
import os
import stat
import threading

import pytest

import report_files
from helpers import run_module


def write(args, check_mode=False, diff=False):
    if diff:
        args = dict(args, _ansible_diff=True)
    result, failed, _ = run_module(report_files.main, args, {}, bins={}, check_mode=check_mode)
    return result, failed


FILES = {'readiness.json': '{"nodes": []}\n', 'gpu-a1.json': '{"row": {}}\n', 'readiness.md': '# r\n'}


def test_writes_every_file_then_changes_nothing(tmp_path):
    d = tmp_path / 'a' / 'b'
    result, failed = write({'path': str(d), 'files': FILES})
    assert not failed and result['changed'], result
    assert result['changed_files'] == sorted(FILES) and result['unchanged'] == 0
    assert {p.name: p.read_text() for p in d.iterdir()} == FILES
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in d.iterdir())
    again, _ = write({'path': str(d), 'files': FILES})
    assert not again['changed'] and again['changed_files'] == [] and again['unchanged'] == 3, again


def test_only_a_changed_content_or_mode_is_written(tmp_path):
    write({'path': str(tmp_path), 'files': FILES})
    os.chmod(tmp_path / 'readiness.md', 0o600)
    result, _ = write({'path': str(tmp_path), 'files': dict(FILES, **{'gpu-a1.json': '{"row": {"x": 1}}\n'})})
    assert result['changed_files'] == ['gpu-a1.json', 'readiness.md'] and result['unchanged'] == 1, result
    assert stat.S_IMODE((tmp_path / 'readiness.md').stat().st_mode) == 0o644
    assert not [p for p in tmp_path.iterdir() if p.name.startswith('.')]  # no temporary file left behind


def test_check_mode_writes_nothing_and_diff_shows_the_change(tmp_path):
    (tmp_path / 'readiness.json').write_text('old\n')
    os.chmod(tmp_path / 'readiness.json', 0o644)
    result, failed = write({'path': str(tmp_path), 'files': {'readiness.json': 'new\n'}}, check_mode=True, diff=True)
    assert not failed and result['changed'] and result['changed_files'] == ['readiness.json']
    assert (tmp_path / 'readiness.json').read_text() == 'old\n'
    assert result['diff'] == [{'before_header': str(tmp_path / 'readiness.json'),
                               'after_header': str(tmp_path / 'readiness.json'), 'before': 'old\n', 'after': 'new\n'}]
    missing = tmp_path / 'not-yet'
    result, _ = write({'path': str(missing), 'files': FILES}, check_mode=True)
    assert result['changed'] and not missing.exists()


@pytest.mark.parametrize('name', ['', '.', '..', '../x.json', 'a/b.json', 'x\0y'])
def test_a_name_that_is_not_a_plain_file_name_fails_before_anything_is_written(tmp_path, name):
    result, failed = write({'path': str(tmp_path), 'files': {'ok.json': '1', name: '2'}})
    assert failed and 'not plain file names' in result['msg'] and repr(name) in result['msg'], result
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize('args, words', [
    ({'files': {'a': 1}}, 'not a string'),
    ({'files': {'a': 'x'}, 'mode': '0999'}, "mode='0999'"),
    ({'files': {'a': 'x'}, 'url': 'ftp://x/y', 'path': None}, "url='ftp://x/y'"),
])
def test_bad_options_are_named(tmp_path, args, words):
    args = dict({'path': str(tmp_path)}, **args)
    result, failed = write({k: v for k, v in args.items() if v is not None})
    assert failed and words in result['msg'], result


def test_a_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / 'f').write_text('')
    result, failed = write({'path': str(tmp_path / 'f'), 'files': FILES})
    assert failed and 'is not a directory' in result['msg'], result


class Store(http.server.BaseHTTPRequestHandler):
    """A report server: PUT stores the body under the path; paths under /deny answer 403."""
    store = {}

    def do_PUT(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers['Content-Length']))
        if self.path.startswith('/deny/') or self.headers.get('Authorization') != 'Bearer t0ken':
            self.send_response(403)
            self.end_headers()
            return
        self.store[self.path] = (body.decode(), self.headers['Content-Type'])
        self.send_response(201)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    Store.store = {}
    httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Store)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield 'http://127.0.0.1:%d' % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


AUTH = {'Authorization': 'Bearer t0ken'}


def test_uploads_every_file_with_the_headers(server):
    result, failed = write({'url': server + '/gpu-lab/99/7/', 'files': FILES, 'headers': AUTH})
    assert not failed and result['changed'] and result['changed_files'] == sorted(FILES), result
    assert Store.store == {'/gpu-lab/99/7/%s' % n: (c, 'application/json' if n.endswith('.json')
                                                     else 'text/plain; charset=utf-8') for n, c in FILES.items()}
    assert 't0ken' not in repr(result)


def test_an_upload_refused_names_the_file_and_status(server):
    result, failed = write({'url': server + '/gpu-lab', 'files': FILES})  # no token
    assert failed and result['status'] == 403 and 'gpu-a1.json answered 403' in result['msg'], result
    assert Store.store == {}


def test_an_unreachable_upload_server_fails_named():
    result, failed = write({'url': 'http://127.0.0.1:9/r', 'files': FILES, 'timeout': 2})
    assert failed and 'http://127.0.0.1:9/r/gpu-a1.json answered -1' in result['msg'], result


def test_check_mode_uploads_nothing(server):
    result, failed = write({'url': server + '/x', 'files': FILES, 'headers': AUTH}, check_mode=True)
    assert not failed and result['changed_files'] == sorted(FILES) and Store.store == {}
