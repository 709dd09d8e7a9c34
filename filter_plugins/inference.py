"""Inference filters: the Triton model configuration carrying the inference_runtime batching settings, and
the checksums of the staged model files.

`triton_model_config` takes the text of a model's `config.pbtxt` (protobuf text format, as staged from shared
storage) and returns it with `max_batch_size`, the `dynamic_batching` preferred batch size and queue delay, and
the given string `parameters` (TensorRT-LLM reads `kv_cache_free_gpu_mem_fraction` there) set to the given
values; every other field, comment and input/output is kept as written. The fields may hold TensorRT-LLM's
`fill_template.py` placeholders (`${triton_max_batch_size}`) or numbers: both are replaced. The role writes the
result to `<model>/configs/<name>.pbtxt`, which `tritonserver --model-config-name=<name>` loads instead of
`config.pbtxt`. `inference_model_checksums` maps one ansible.builtin.find result to {relative path: checksum}.
"""

import json
import os
import re

from ansible.errors import AnsibleFilterError

_VALUE = r"(?:-?\d+|\$\{[A-Za-z0-9_]+\})"


def _scan(text, what):
    """Per character: the nesting depth ({ and [) and whether it is code (not in a string or a comment); and
    for each opening brace or bracket, the index of its closing one. A ${placeholder} is one token."""
    depths, code, closes, stack = [], [], {}, []
    quote, comment, escaped, placeholder = None, False, False, False
    for i, char in enumerate(text):
        is_code = False
        if comment:
            comment = char != "\n"
        elif quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = None
        elif placeholder:
            is_code, placeholder = True, char != "}"
        elif char in "\"'":
            quote = char
        elif char == "#":
            comment = True
        else:
            is_code = True
            if char == "$" and text[i + 1:i + 2] == "{":
                placeholder = True
            elif char in "}]":
                if not stack or text[stack[-1]] != "{["["}]".index(char)]:
                    raise AnsibleFilterError("%s: unbalanced '%s' at offset %d" % (what, char, i))
                closes[stack.pop()] = i
        depths.append(len(stack))
        code.append(is_code)
        if is_code and not placeholder and char in "{[":
            stack.append(i)
    if quote or stack or placeholder:
        raise AnsibleFilterError("%s: unterminated %s" % (what, "string" if quote else "'{' or '['"))
    return depths, code, closes


def _fields(text, depths, code, pattern, depth, start=0, end=None):
    """Matches of pattern that begin in code at the given depth, within [start, end)."""
    end = len(text) if end is None else end
    return [m for m in re.finditer(pattern, text[:end]) if m.start() >= start
            and code[m.start()] and depths[m.start()] == depth]


def _field_at_top(text, depths, code, name):
    return _fields(text, depths, code, r"(?<![A-Za-z0-9_])%s\s*:?\s*[{\[]" % name, 0)


def _parameter(key, value):
    return 'parameters: {\n  key: %s\n  value: {\n    string_value: %s\n  }\n}' % (json.dumps(key), json.dumps(value))


def triton_model_config(text, max_batch_size, max_queue_delay_microseconds, parameters=None, path="config.pbtxt"):
    """text (config.pbtxt) with the batch size, the dynamic batcher and the string parameters set."""
    what = "triton_model_config(%s)" % path
    if not isinstance(text, str) or not text.strip():
        raise AnsibleFilterError("%s: the model configuration is empty" % what)
    try:
        batch, delay = int(max_batch_size), int(max_queue_delay_microseconds)
    except (TypeError, ValueError):
        raise AnsibleFilterError("%s: max_batch_size=%r and max_queue_delay_microseconds=%r must be integers"
                                 % (what, max_batch_size, max_queue_delay_microseconds))
    if batch < 1 or delay < 0:
        raise AnsibleFilterError("%s: max_batch_size=%d must be at least 1 and max_queue_delay_microseconds=%d "
                                 "not negative" % (what, batch, delay))
    depths, code, closes = _scan(text, what)
    for scheduler, why in (("sequence_batching", "a sequence batcher, not the dynamic batcher"),
                           ("ensemble_scheduling", "an ensemble: set the batching on the models it composes")):
        if _field_at_top(text, depths, code, scheduler):
            raise AnsibleFilterError("%s: the model is %s" % (what, why))
    sizes = _fields(text, depths, code, r"(?<![A-Za-z0-9_])max_batch_size\s*:\s*(%s)" % _VALUE, 0)
    if len(sizes) != 1:
        raise AnsibleFilterError("%s: expected one max_batch_size field, found %d" % (what, len(sizes)))
    if sizes[0].group(1) in ("0", "-0"):
        raise AnsibleFilterError("%s: max_batch_size: 0 means the model does not batch; batching settings need a "
                                 "model built for a batch dimension" % what)

    # Edits from the end of the text backwards, so earlier offsets stay valid.
    edits = [(sizes[0].start(1), sizes[0].end(1), str(batch))]
    batcher = "preferred_batch_size: [ %d ]\n  max_queue_delay_microseconds: %d" % (batch, delay)
    blocks = _field_at_top(text, depths, code, "dynamic_batching")
    if len(blocks) > 1:
        raise AnsibleFilterError("%s: more than one dynamic_batching block" % what)
    if blocks:
        opening = blocks[0].end() - 1
        closing = closes[opening]
        inner = text[opening + 1:closing]
        for field in reversed(_fields(text, depths, code,
                                      r"[ \t]*(?<![A-Za-z0-9_])(?:preferred_batch_size\s*:\s*(?:\[[^\]]*\]|%s)"
                                      r"|max_queue_delay_microseconds\s*:\s*%s)[ \t]*\n?" % (_VALUE, _VALUE),
                                      depths[opening] + 1, opening, closing)):
            start, end = field.start() - opening - 1, field.end() - opening - 1
            inner = inner[:start] + inner[end:]
        kept = inner.rstrip()
        edits.append((opening + 1, closing, "\n  %s%s\n" % (batcher, kept if kept.strip() else "")))
    else:
        line_end = text.find("\n", sizes[0].end())
        line_end = len(text) if line_end < 0 else line_end
        edits.append((line_end, line_end, "\n\ndynamic_batching {\n  %s\n}" % batcher))

    appended = []
    for key, value in sorted((parameters or {}).items()):
        key, value = str(key), str(value)
        found = False
        for block in _field_at_top(text, depths, code, "parameters"):
            opening = block.end() - 1
            end = closes[opening] + 1
            keys = _fields(text, depths, code, r'(?<![A-Za-z0-9_])key\s*:\s*"([^"]*)"', depths[opening] + 1,
                           opening, end)
            if keys and keys[0].group(1) == key:
                edits.append((block.start(), end, _parameter(key, value)))
                found = True
        if not found:
            appended.append(_parameter(key, value))

    result = text
    for start, end, new in sorted(edits, key=lambda edit: (edit[0], edit[1]), reverse=True):
        result = result[:start] + new + result[end:]
    if appended:
        result = result.rstrip("\n") + "\n\n" + "\n".join(appended) + "\n"
    _, code = _scan(result, what)[:2]
    left = sorted({m.group(0) for m in re.finditer(r"\$\{[A-Za-z0-9_]+\}", result) if code[m.start()]})
    if left:
        raise AnsibleFilterError("%s: %s left unfilled (Triton cannot parse a placeholder as a field value); only "
                                 "max_batch_size, the dynamic batcher and the parameters %s are set here: fill the "
                                 "others in the staged file (TensorRT-LLM's fill_template.py)"
                                 % (what, ", ".join(left), ", ".join(sorted(parameters or {})) or "(none)"))
    return result


def inference_model_checksums(find_result, root):
    """{path relative to root: checksum} of the files in an ansible.builtin.find result (get_checksum: true)."""
    if not isinstance(find_result, dict) or not isinstance(find_result.get("files"), list):
        raise AnsibleFilterError("inference_model_checksums: expected an ansible.builtin.find result with files, "
                                 "got %r" % (type(find_result).__name__,))
    return {os.path.relpath(entry["path"], str(root)): entry["checksum"]
            for entry in find_result["files"] if entry.get("checksum")}


def _number(value, kind=int):
    """value as an int/float the way the role reads it, None when it is not one (a bool is not a number)."""
    if isinstance(value, bool):
        return None
    try:
        return kind(str(value).strip())
    except (TypeError, ValueError):
        return None


def _outside(value, low, high, kind=int, low_open=False):
    n = _number(value, kind)
    return n is None or not ((low < n) if low_open else (low <= n)) or n > high


_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_NOT_INSIDE = re.compile(r"^/|(^|/)\.\.(/|$)")


def inference_runtime_problems(values, engines, gpu_count=None, profile=None):
    """Every rule on the inference_runtime settings that an argument spec cannot say, one text per problem
    ("<variable>=<value> ..."). A rule runs only when its variables are in `values`: the role passes all of
    them, preflight the ones an inventory sets (so a partial inventory is judged on what it says).
    gpu_count/profile: the node's hardware profile, for the tensor-parallel rule."""
    v = values
    out = []
    if "inference_runtime_engine" in v and v["inference_runtime_engine"] not in engines:
        out.append("inference_runtime_engine=%s is not one of %s" % (v["inference_runtime_engine"], ", ".join(engines)))
    tp = v.get("inference_runtime_tensor_parallel_size")
    if tp is not None and gpu_count is not None:
        n = _number(tp) if re.match(r"^[0-9]+$", str(tp)) else None
        if n is None or n < 1 or int(gpu_count) % n:
            out.append("inference_runtime_tensor_parallel_size=%s does not divide the GPU count %s of "
                       "hardware_profile %s" % (tp, gpu_count, profile))
    if "inference_runtime_max_batch_size" in v and _outside(v["inference_runtime_max_batch_size"], 16, 256):
        out.append("inference_runtime_max_batch_size=%s is outside 16-256" % v["inference_runtime_max_batch_size"])
    if "inference_runtime_max_tokens_per_batch" in v and "inference_runtime_max_batch_size" in v and \
            (_number(v["inference_runtime_max_tokens_per_batch"]) or 0) < \
            (_number(v["inference_runtime_max_batch_size"]) or 0):
        out.append("inference_runtime_max_tokens_per_batch=%s is smaller than inference_runtime_max_batch_size"
                   % v["inference_runtime_max_tokens_per_batch"])
    if "inference_runtime_batch_timeout_ms" in v and _outside(v["inference_runtime_batch_timeout_ms"], 1, 10000):
        out.append("inference_runtime_batch_timeout_ms=%s is outside 1-10000" % v["inference_runtime_batch_timeout_ms"])
    if "inference_runtime_quantization" in v and v["inference_runtime_quantization"] not in ("fp8", "none"):
        out.append("inference_runtime_quantization=%s is not fp8 or none" % v["inference_runtime_quantization"])
    if "inference_runtime_gpu_memory_fraction" in v and \
            _outside(v["inference_runtime_gpu_memory_fraction"], 0, 1, float, low_open=True):
        out.append("inference_runtime_gpu_memory_fraction=%s is outside (0, 1]"
                   % v["inference_runtime_gpu_memory_fraction"])
    if "inference_runtime_port" in v and _outside(v["inference_runtime_port"], 1, 65533):
        out.append("inference_runtime_port=%s is not a TCP port (1-65533)" % v["inference_runtime_port"])
    if "inference_runtime_version" in v:
        version = "" if v["inference_runtime_version"] is None else str(v["inference_runtime_version"])
        if not version:
            out.append("inference_runtime_version is empty")
        elif not _IMAGE_TAG.match(version):
            out.append("inference_runtime_version=%s is not an image tag" % version)
    files = v.get("inference_runtime_model_files")
    if "inference_runtime_model_files" in v:
        if not isinstance(files, dict) or not files:
            out.append("inference_runtime_model_files is empty: every staged model file needs its sha256 checksum"
                       if not files else "inference_runtime_model_files is not a mapping of file to sha256")
        else:
            bad = [k for k, c in files.items() if not isinstance(c, str) or not _SHA256.match(c)]
            if bad:
                out.append("inference_runtime_model_files[%s] has no sha256 checksum (64 lowercase hex digits)"
                           % "], [".join(str(k) for k in bad))
            if v.get("inference_runtime_engine") == "triton" and "config.pbtxt" not in files:
                out.append("inference_runtime_model_files has no config.pbtxt: the triton engine renders its "
                           "batching settings from the model configuration")
            outside = [str(k) for k in files if _NOT_INSIDE.search(str(k))]
            if outside:
                out.append("inference_runtime_model_files[%s] is not a relative path inside the model"
                           % "], [".join(outside))
    return out


# What each engine preset exports for the KPI rules: the metrics endpoint (path, port offset from the API
# port) and the names of its generated-token counter and end-to-end latency histogram, in seconds. One source
# for the inference_runtime role (which reads the endpoint after a start) and the prometheus role (scrape
# targets and KPI recording rules).
#   vLLM:   /metrics on the API port, vllm:generation_tokens_total, vllm:e2e_request_latency_seconds
#           (vLLM's production metrics).
#   SGLang: /metrics on the API port with --enable-metrics, sglang:generation_tokens_total,
#           sglang:e2e_request_latency_seconds (docs.sglang.io, "Production Metrics").
#   TensorRT-LLM: trtllm-serve's /prometheus/metrics, trtllm_generation_tokens_total,
#           trtllm_e2e_request_latency_seconds (tensorrt_llm/metrics/collector.py; older releases export
#           fewer metrics).
#   Triton: /metrics on the metrics port (HTTP port + 2 in the preset). It has no generated-token counter
#           (triton-inference-server/server#7145), so a Triton pool has no tokens/s or cost KPI; its latency is
#           the nv_inference_request_summary_us summary (--metrics-config summary_latencies=true), in microseconds.
#   lab:    the lab engine answers under vLLM's names, as a real vLLM server does.
_VLLM_METRICS = {"path": "/metrics", "port_offset": 0, "tokens": "vllm:generation_tokens_total",
                 "latency_histogram": "vllm:e2e_request_latency_seconds", "latency_summary_us": None}
ENGINE_METRICS = {
    "vllm": _VLLM_METRICS,
    "lab": _VLLM_METRICS,
    "sglang": {"path": "/metrics", "port_offset": 0, "tokens": "sglang:generation_tokens_total",
               "latency_histogram": "sglang:e2e_request_latency_seconds", "latency_summary_us": None},
    "tensorrt_llm": {"path": "/prometheus/metrics", "port_offset": 0, "tokens": "trtllm_generation_tokens_total",
                     "latency_histogram": "trtllm_e2e_request_latency_seconds", "latency_summary_us": None},
    "triton": {"path": "/metrics", "port_offset": 2, "tokens": None, "latency_histogram": None,
               "latency_summary_us": "nv_inference_request_summary_us"},
}


def inference_engine_metrics(engine):
    """ENGINE_METRICS[engine]; an engine without an entry is an error naming it."""
    try:
        return dict(ENGINE_METRICS[engine])
    except (KeyError, TypeError):
        raise AnsibleFilterError("inference_engine_metrics: unknown engine %r (known: %s)"
                                 % (engine, ", ".join(sorted(ENGINE_METRICS))))


def inference_metric_names(engines=None):
    """The distinct token counters, latency histograms and latency summaries of `engines` (default: all), for
    rules rendered once per name: {'tokens': [...], 'latency_histogram': [...], 'latency_summary_us': [...]}."""
    wanted = sorted(ENGINE_METRICS) if engines is None else sorted(set(engines))
    out = {"tokens": [], "latency_histogram": [], "latency_summary_us": []}
    for engine in wanted:
        for key in out:
            name = inference_engine_metrics(engine)[key]
            if name and name not in out[key]:
                out[key].append(name)
    return out


class FilterModule(object):
    def filters(self):
        return {"triton_model_config": triton_model_config, "inference_model_checksums": inference_model_checksums,
                "inference_runtime_problems": inference_runtime_problems,
                "inference_engine_metrics": inference_engine_metrics, "inference_metric_names": inference_metric_names}
