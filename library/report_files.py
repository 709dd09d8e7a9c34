#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Write a set of report files into a directory, or upload them, in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: report_files
short_description: Write or upload a set of report files in one module run
description:
  - Writes every file of O(files) into O(path), each atomically, and only those whose content or mode
    differ, so a rerun with the same reports changes nothing. One run for a thousand nodes' results
    where M(ansible.builtin.copy) in a loop costs a module run per node.
  - Or uploads every file to O(url) with an HTTP(S) C(PUT) each (an object store, a report server), for
    jobs whose own directory does not outlive them (an AWX job's container).
  - Fails, before writing or sending anything, on a file name that is not a plain name; an upload that
    does not answer 2xx fails naming the file, the URL and the status.
  - Runs where it is delegated to; the readiness report runs it on the controller.
options:
  path:
    description: Directory to write into; created (and its parents) when missing. One of O(path), O(url).
    type: path
  url:
    description:
      - Base URL to upload to; each file goes to C(<url>/<name>) with C(PUT). One of O(path), O(url).
      - Check mode sends nothing and reports every file as one it would upload.
    type: str
  files:
    description: File name (no directory part) to content.
    type: dict
    required: true
  mode:
    description: Mode of the files written to O(path).
    type: str
    default: "0644"
  headers:
    description: Extra request headers for O(url), such as an C(Authorization) token from a vault or an AWX credential.
    type: dict
    default: {}
  validate_certs:
    description: Verify the upload server's TLS certificate.
    type: bool
    default: true
  ca_path:
    description: CA bundle (PEM) for the upload server's certificate; empty, the system's trust store.
    type: path
  timeout:
    description: Seconds to wait for each upload's answer.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
author: GPU inference cluster toolkit
"""

EXAMPLES = r"""
- name: Write the readiness report
  report_files:
    path: /srv/reports/gpu-prod
    files:
      readiness.json: "{{ report | to_nice_json }}"
      gpu-a1.json: "{{ hostvars['gpu-a1'].node_verify_report | to_nice_json }}"
  delegate_to: localhost

- name: Upload it where it outlives the job
  report_files:
    url: https://reports.example.net/gpu-prod/4711
    files: "{{ report_files }}"
    headers:
      Authorization: "Bearer {{ report_upload_token }}"
  no_log: true
"""

RETURN = r"""
changed_files:
  description: Names of the files written (or, in check mode, that would be), or uploaded, sorted.
  returned: always
  type: list
  elements: str
  sample: [gpu-a2.json, readiness.json]
unchanged:
  description: How many files of O(path) already had that content and mode.
  returned: always
  type: int
  sample: 998
location:
  description: Where the files are, O(path) or O(url).
  returned: always
  type: str
  sample: /srv/reports/gpu-prod
"""

import os
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import fetch_url


def bad_names(names):
    """The names that are not one plain file name (empty, '.', '..', a slash, a NUL)."""
    return sorted(n for n in names if not n or n in (".", "..") or "/" in n or "\0" in n)


def parse_mode(mode):
    """An octal mode string as an int, or None."""
    try:
        value = int(str(mode), 8)
    except ValueError:
        return None
    return value if 0 <= value <= 0o7777 else None


def current(path):
    """(content bytes, mode) of a file, or (None, None) when it is absent."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        return data, stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None, None


def write_files(module, directory, files, mode):
    changed, unchanged, diffs = [], 0, []
    for name in sorted(files):
        dest = os.path.join(directory, name)
        data = files[name].encode("utf-8")
        before, before_mode = current(dest)
        if before == data and before_mode == mode:
            unchanged += 1
            continue
        changed.append(name)
        if module._diff:
            diffs.append({"before_header": dest, "after_header": dest,
                          "before": before.decode("utf-8", "replace") if before is not None else "",
                          "after": files[name]})
        if module.check_mode:
            continue
        fd, tmp = tempfile.mkstemp(prefix=".%s." % name, dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, dest)
        except OSError as e:
            if os.path.exists(tmp):
                os.unlink(tmp)
            module.fail_json(msg="report_files: cannot write %s: %s" % (dest, e), changed_files=changed[:-1])
    return changed, unchanged, diffs


def upload_files(module, url, files):
    base = url.rstrip("/")
    if module.check_mode:
        return sorted(files)
    sent = []
    headers = {"Content-Type": "application/octet-stream"}
    headers.update(module.params["headers"])
    for name in sorted(files):
        target = "%s/%s" % (base, name)
        ctype = "application/json" if name.endswith(".json") else "text/plain; charset=utf-8"
        resp, info = fetch_url(module, target, data=files[name].encode("utf-8"), method="PUT",
                               headers=dict(headers, **{"Content-Type": ctype}),
                               timeout=module.params["timeout"], ca_path=module.params["ca_path"])
        status = info.get("status", -1)
        if resp is not None:
            resp.read()
            resp.close()
        if not 200 <= status < 300:
            module.fail_json(msg="report_files: PUT %s answered %s (%s), expected 2xx; uploaded before it: %s"
                             % (target, status, info.get("msg", ""), ", ".join(sent) or "none"),
                             changed=bool(sent), changed_files=sent, status=status)
        sent.append(name)
    return sent


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path"),
            url=dict(type="str"),
            files=dict(type="dict", required=True),
            mode=dict(type="str", default="0644"),
            headers=dict(type="dict", default={}, no_log=True),
            validate_certs=dict(type="bool", default=True),
            ca_path=dict(type="path"),
            timeout=dict(type="int", default=30),
        ),
        mutually_exclusive=[("path", "url")],
        required_one_of=[("path", "url")],
        supports_check_mode=True,
    )
    p = module.params
    files = p["files"]
    bad = bad_names(files)
    if bad:
        module.fail_json(msg="report_files: files has names that are not plain file names: %s" % bad)
    nonstr = sorted(n for n, v in files.items() if not isinstance(v, str))
    if nonstr:
        module.fail_json(msg="report_files: the content of %s is not a string (render it with to_json)" % nonstr)
    if p["url"]:
        if not p["url"].startswith(("http://", "https://")):
            module.fail_json(msg="report_files: url=%r is not an http:// or https:// URL" % p["url"])
        if p["timeout"] <= 0:
            module.fail_json(msg="report_files: timeout=%s must be a positive number of seconds" % p["timeout"])
        sent = upload_files(module, p["url"], files)
        module.exit_json(changed=bool(sent), changed_files=sent, unchanged=0, location=p["url"])
    mode = parse_mode(p["mode"])
    if mode is None:
        module.fail_json(msg="report_files: mode=%r is not an octal file mode" % p["mode"])
    directory = p["path"]
    if os.path.exists(directory) and not os.path.isdir(directory):
        module.fail_json(msg="report_files: path=%s exists and is not a directory" % directory)
    made_dir = not os.path.isdir(directory)
    if made_dir and not module.check_mode:
        try:
            os.makedirs(directory, 0o755, exist_ok=True)
        except OSError as e:
            module.fail_json(msg="report_files: cannot create path=%s: %s" % (directory, e))
    changed, unchanged, diffs = write_files(module, directory, files, mode)
    result = dict(changed=bool(changed) or made_dir, changed_files=changed, unchanged=unchanged, location=directory)
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
