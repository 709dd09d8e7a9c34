"""Inference filters: the checksums of the staged model files, read from one ansible.builtin.find result."""

import os

from ansible.errors import AnsibleFilterError


def inference_model_checksums(find_result, root):
    """{path relative to root: checksum} of the files in an ansible.builtin.find result (get_checksum: true)."""
    if not isinstance(find_result, dict) or not isinstance(find_result.get("files"), list):
        raise AnsibleFilterError("inference_model_checksums: expected an ansible.builtin.find result with files, "
                                 "got %r" % (type(find_result).__name__,))
    return {os.path.relpath(entry["path"], str(root)): entry["checksum"]
            for entry in find_result["files"] if entry.get("checksum")}


class FilterModule(object):
    def filters(self):
        return {"inference_model_checksums": inference_model_checksums}
