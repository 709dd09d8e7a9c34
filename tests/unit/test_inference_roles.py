"""The inference roles: every engine preset renders the unit the issue asks for (docker run with the NVIDIA
runtime, --ipc=host, memlock/stack ulimits, the NCCL env file, the common settings mapped onto each engine's
own flags), the lab engine runs under the same unit name; documentation agrees with the argument specs; bad
input is rejected naming the host and the variable."""

import base64
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import role_docs
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
INFERENCE_ROLES = ("inference_runtime", "inference_lb")
RUNTIME = ROLES / "inference_runtime"
MODEL = {"config.json": "a" * 64, "model-00001.safetensors": "b" * 64}


def yaml_load(path):
    import yaml
    return yaml.safe_load(Path(path).read_text())


def _vars(**overrides):
    loader = DataLoader()
    variables = {}
    variables.update(loader.load_from_file(str(REPO / "playbooks" / "vars" / "hardware_profiles.yml"), trusted_as_template=True))
    variables.update(loader.load_from_file(str(RUNTIME / "defaults" / "main.yml"), trusted_as_template=True))
    variables.update(loader.load_from_file(str(RUNTIME / "vars" / "main.yml"), trusted_as_template=True))
    variables.update({"role_path": str(RUNTIME), "inventory_hostname": "gpu-a1", "ansible_managed": "Ansible managed",
                      "group_names": ["gpu_nodes", "rack_a"], "groups": {"rack_a": ["gpu-a1"]},
                      "hardware_profile": "hgx-h100-8gpu", "inference_runtime_model_name": "llama-70b",
                      "inference_runtime_model_files": MODEL})
    variables.update(overrides)
    return loader, variables


def render_unit(**overrides):
    loader, variables = _vars(**overrides)
    templar = Templar(loader=loader, variables=variables)
    text = (RUNTIME / "templates" / "inference-runtime.service.j2").read_text()
    return templar.template(trust_as_template(text))


def exec_start(unit):
    """ExecStart= as systemd reads it: continuation lines joined, then split like a shell word list."""
    joined = re.sub(r"\\\n\s*", " ", unit)
    line = [entry for entry in joined.splitlines() if entry.startswith("ExecStart=")]
    assert len(line) == 1, unit
    return shlex.split(line[0][len("ExecStart="):])


def flag(argv, name):
    """The value after a flag, given as '--flag value' or '--flag=value'."""
    for i, arg in enumerate(argv):
        if arg == name:
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    raise AssertionError("%s not in %s" % (name, argv))


ENGINE_FLAGS = {
    # engine: (image, command, {common setting: engine flag})
    "vllm": ("vllm/vllm-openai", [], {"tp": "--tensor-parallel-size", "batch": "--max-num-seqs",
                                      "tokens": "--max-num-batched-tokens", "mem": "--gpu-memory-utilization",
                                      "port": "--port", "model": "--model"}),
    "sglang": ("lmsysorg/sglang", ["python3", "-m", "sglang.launch_server"],
               {"tp": "--tp-size", "batch": "--max-running-requests", "tokens": "--max-prefill-tokens",
                "mem": "--mem-fraction-static", "port": "--port", "model": "--model-path"}),
    "tensorrt_llm": ("nvcr.io/nvidia/tensorrt-llm/release", ["trtllm-serve", "serve"],
                     {"tp": "--tp_size", "batch": "--max_batch_size", "tokens": "--max_num_tokens",
                      "mem": "--kv_cache_free_gpu_memory_fraction", "port": "--port"}),
    "triton": ("nvcr.io/nvidia/tritonserver", ["tritonserver"], {"port": "--http-port"}),
}


@pytest.mark.parametrize("engine", sorted(ENGINE_FLAGS))
def test_engine_runs_in_docker_with_the_nvidia_runtime(engine):
    argv = exec_start(render_unit(inference_runtime_engine=engine))
    assert argv[:5] == ["/usr/bin/docker", "run", "--rm", "--name", "inference-runtime"]
    for needed in (["--runtime", "nvidia"], ["--gpus", "all"], ["--ipc=host"], ["--network", "host"],
                   ["--ulimit", "memlock=-1"], ["--ulimit", "stack=67108864"], ["--env-file", "/etc/nccl.conf"]):
        assert any(argv[i:i + len(needed)] == needed for i in range(len(argv))), (needed, argv)
    assert "--volume" in argv and flag(argv, "--volume") == \
        "/var/lib/inference-runtime/models/llama-70b:/models/llama-70b:ro"
    image, command, _ = ENGINE_FLAGS[engine]
    image_at = [i for i, arg in enumerate(argv) if arg.startswith(image + ":")]
    assert len(image_at) == 1, argv
    assert argv[image_at[0] + 1:image_at[0] + 1 + len(command)] == command
    # docker options before the image, engine arguments after it
    assert argv.index("--gpus") < image_at[0]


@pytest.mark.parametrize("engine", sorted(ENGINE_FLAGS))
def test_common_settings_reach_the_engine_flags(engine):
    argv = exec_start(render_unit(inference_runtime_engine=engine, inference_runtime_tensor_parallel_size=4,
                                  inference_runtime_max_batch_size=64, inference_runtime_max_tokens_per_batch=4096,
                                  inference_runtime_gpu_memory_fraction=0.85, inference_runtime_port=8100))
    wanted = {"tp": "4", "batch": "64", "tokens": "4096", "mem": "0.85", "port": "8100",
              "model": "/models/llama-70b"}
    for setting, name in ENGINE_FLAGS[engine][2].items():
        assert flag(argv, name) == wanted[setting], (engine, name, argv)


def test_tensor_parallel_defaults_to_the_profile_gpu_count():
    assert flag(exec_start(render_unit()), "--tensor-parallel-size") == "8"
    assert flag(exec_start(render_unit(hardware_profile="pcie-l40s-4gpu")), "--tensor-parallel-size") == "4"


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_fp8_is_e4m3_weights_and_kv_cache(engine):
    argv = exec_start(render_unit(inference_runtime_engine=engine))
    assert flag(argv, "--quantization") == "fp8" and flag(argv, "--kv-cache-dtype") == "fp8_e4m3"
    argv = exec_start(render_unit(inference_runtime_engine=engine, inference_runtime_quantization="none"))
    assert "--quantization" not in argv and "--kv-cache-dtype" not in argv


def test_triton_serves_the_model_repository_with_metrics():
    argv = exec_start(render_unit(inference_runtime_engine="triton"))
    assert flag(argv, "--model-repository") == "/models"
    assert flag(argv, "--metrics-port") == "8002" and flag(argv, "--allow-metrics") == "true"
    assert flag(argv, "--load-model") == "llama-70b"
    # the latency summary the KPI rules read for a Triton pool
    assert flag(argv, "--metrics-config") == "summary_latencies=true"


def test_every_engine_names_its_metrics_and_an_unknown_one_is_refused():
    sys.path.insert(0, str(REPO / "filter_plugins"))
    import inference
    engines = yaml_load(RUNTIME / "vars" / "main.yml")["_inference_runtime_engines"]
    for engine in engines:
        m = inference.inference_engine_metrics(engine)
        assert m["path"].startswith("/") and (m["latency_histogram"] or m["latency_summary_us"]), engine
    assert inference.inference_engine_metrics("tensorrt_llm")["path"] == "/prometheus/metrics"
    assert inference.inference_engine_metrics("triton")["port_offset"] == 2
    names = inference.inference_metric_names(None)
    assert names["tokens"] == ["vllm:generation_tokens_total", "sglang:generation_tokens_total",
                               "trtllm_generation_tokens_total"]
    with pytest.raises(Exception, match="unknown engine 'vllm2'"):
        inference.inference_engine_metrics("vllm2")


def test_lab_engine_exports_the_vllm_series_the_kpis_read(tmp_path):
    """Tokens counted and every completion in the e2e histogram, cumulative buckets, under vLLM's names."""
    sys.path.insert(0, str(REPO / "lab" / "engine"))
    sys.path.insert(0, str(REPO / "filter_plugins"))
    import inference
    import lab_engine
    model = tmp_path / "m"
    model.mkdir()
    engine = lab_engine.Engine(lab_engine.parse_args(["--model", str(model), "--served-model-name", "m",
                                                      "--version", "1.0.0"]))
    for seconds in (0.1, 0.4, 0.4, 9000.0):
        engine.observe(seconds)
    engine.tokens = 24
    text = engine.metrics()
    names = inference.inference_engine_metrics("lab")
    assert '%s{model_name="m"} 24' % names["tokens"] in text
    h = names["latency_histogram"]
    assert '%s_bucket{le="0.3",model_name="m"} 1' % h in text
    assert '%s_bucket{le="0.5",model_name="m"} 3' % h in text
    assert '%s_bucket{le="7680.0",model_name="m"} 3' % h in text
    assert '%s_bucket{le="+Inf",model_name="m"} 4' % h in text and '%s_count{model_name="m"} 4' % h in text


def test_lab_engine_stops_at_once_with_an_idle_keepalive_connection_open(tmp_path):
    """SIGTERM with a scraper's keep-alive connection open and idle: the engine exits within seconds (it waited
    for systemd's 60 s stop timeout and a SIGKILL before), after answering what was in flight."""
    import http.client
    import signal
    import socket
    import time
    model = tmp_path / "m"
    model.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(REPO / "lab" / "engine" / "lab_engine.py"), "--model", str(model),
                             "--served-model-name", "m", "--version", "1.0.0", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert "serving m on 127.0.0.1" in proc.stdout.readline()
        idle = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        idle.request("GET", "/metrics")
        assert idle.getresponse().read() and idle.sock is not None  # kept alive (HTTP/1.1), now idle
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - start < 5
    finally:
        proc.kill()
        proc.wait()


def test_image_tag_is_the_version_and_extra_args_and_env_are_passed():
    argv = exec_start(render_unit(inference_runtime_version="v0.6.5", inference_runtime_extra_args=["--seed", "7"],
                                  inference_runtime_env={"HF_HUB_OFFLINE": "1"}))
    assert "vllm/vllm-openai:v0.6.5" in argv
    assert argv[-2:] == ["--seed", "7"]
    assert flag(argv, "--env") == "HF_HUB_OFFLINE=1"


def test_unit_sets_limits_and_stops_the_container():
    unit = render_unit()
    assert "LimitMEMLOCK=infinity" in unit and "LimitSTACK=67108864" in unit
    assert "Requires=docker.service" in unit
    assert "ExecStop=/usr/bin/docker stop --time 30 inference-runtime" in unit


def test_lab_engine_runs_directly_under_the_same_unit():
    unit = render_unit(inference_runtime_engine="lab", inference_runtime_version="1.0.0")
    argv = exec_start(unit)
    assert argv[:2] == ["/usr/bin/python3", "/opt/inference-runtime/lab_engine.py"]
    assert "docker" not in unit.split("[Service]", 1)[1]
    assert flag(argv, "--model") == "/var/lib/inference-runtime/models/llama-70b"
    assert flag(argv, "--version") == "1.0.0" and flag(argv, "--tensor-parallel-size") == "8"
    assert flag(argv, "--batch-timeout-ms") == "100" and flag(argv, "--quantization") == "fp8_e4m3"
    assert "--fail-health" not in argv
    bad = exec_start(render_unit(inference_runtime_engine="lab", inference_runtime_version="2.0.0-bad",
                                 inference_runtime_lab_bad_versions=["2.0.0-bad"]))
    assert "--fail-health" in bad


def test_lab_engine_parses_the_rendered_arguments():
    sys.path.insert(0, str(REPO / "lab" / "engine"))
    import lab_engine
    argv = exec_start(render_unit(inference_runtime_engine="lab", inference_runtime_version="1.0.0"))
    args = lab_engine.parse_args(argv[2:])
    assert (args.version, args.tensor_parallel_size, args.max_batch_size, args.max_tokens_per_batch) == \
        ("1.0.0", 8, 256, 8192)


@pytest.mark.parametrize("role", INFERENCE_ROLES)
def test_every_default_is_specified_with_its_value(role):
    role_docs.assert_defaults_specified(role)


@pytest.mark.parametrize("role", INFERENCE_ROLES)
def test_readme_table_lists_the_spec(role):
    role_docs.assert_readme_lists(role, role_docs.spec(role))


GOOD = {"inference_runtime_model_files": MODEL, "hardware_profile": "hgx-h100-8gpu"}
BAD_INPUT = [
    ("inference_runtime", {"inference_runtime_tensor_parallel_size": 3},
     "inference_runtime_tensor_parallel_size=3 does not divide the GPU count 8 of hardware_profile hgx-h100-8gpu"),
    ("inference_runtime", {"inference_runtime_max_batch_size": 512}, "inference_runtime_max_batch_size=512 is outside 16-256"),
    ("inference_runtime", {"inference_runtime_max_batch_size": 8}, "inference_runtime_max_batch_size=8 is outside 16-256"),
    ("inference_runtime", {"inference_runtime_engine": "tgi"},
     "inference_runtime_engine=tgi is not one of vllm, triton, tensorrt_llm, sglang, lab"),
    ("inference_runtime", {"inference_runtime_model_files": {"config.json": "a" * 64, "model.safetensors": ""}},
     "inference_runtime_model_files[model.safetensors] has no sha256 checksum"),
    ("inference_runtime", {"inference_runtime_model_files": {}}, "inference_runtime_model_files is empty"),
    ("inference_runtime", {"hardware_profile": "hgx-x999"}, "hardware_profile=hgx-x999 is not a key of hardware_profiles"),
    ("inference_runtime", {"inference_runtime_gpu_memory_fraction": 1.5},
     "inference_runtime_gpu_memory_fraction=1.5 is outside (0, 1]"),
    ("inference_runtime", {"inference_runtime_engine": "triton"},
     "inference_runtime_model_files has no config.pbtxt: the triton engine renders its batching settings"),
    ("inference_lb", {"inference_lb_backends": ["localhost"]},
     "inference_lb_allowed_networks is empty: list the internal client networks"),
    ("inference_lb", {"inference_lb_backends": ["localhost"], "inference_lb_allowed_networks": ["10.0.0.0/8", "vip"],
                      "inference_lb_tls_generate_ca": True},
     "inference_lb_allowed_networks has entries that are not networks: vip"),
    ("inference_lb", {"inference_lb_backends": ["localhost"], "inference_lb_allowed_networks": ["10.0.0.0/8"]},
     "inference_lb_tls_certificate and inference_lb_tls_private_key are empty"),
]


@pytest.mark.parametrize("role,variables,message", BAD_INPUT,
                         ids=["%s-%s" % (r, "-".join(v)) for r, v, _ in BAD_INPUT])
def test_bad_input_is_rejected_naming_host_and_variable(tmp_path, role, variables, message):
    """The role's first tasks stop the play, in check mode on the controller, before anything else runs."""
    play = tmp_path / "play.yml"
    play.write_text(json.dumps([{"name": "Apply %s" % role, "hosts": "localhost", "connection": "local",
                                 "gather_facts": False,
                                 "vars_files": [str(REPO / "playbooks" / "vars" / "hardware_profiles.yml")],
                                 "roles": [role]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_ROLES_PATH=str(ROLES))
    extra = dict(GOOD, **variables) if role == "inference_runtime" else variables
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "--check",
                           str(play), "-e", json.dumps(extra)], cwd=str(REPO), env=env, check=False,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "localhost: " + message in re.sub(r"\s+", " ", proc.stdout), proc.stdout[-3000:]
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", proc.stdout), proc.stdout[-1500:]


# Triton: the staged config.pbtxt (here a TensorRT-LLM model with fill_template.py placeholders) is written again
# with the common batching settings to configs/inference-runtime.pbtxt, which --model-config-name selects.
TRITON_CONFIG = """name: "llama-70b"
backend: "tensorrtllm"
max_batch_size: ${triton_max_batch_size}

model_transaction_policy {
  decoupled: true
}

dynamic_batching {
  preferred_batch_size: [ ${triton_max_batch_size} ]
  max_queue_delay_microseconds: ${max_queue_delay_microseconds}
  default_queue_policy { max_queue_size: 512 }
}

input [
  { name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] allow_ragged_batch: true },
  { name: "input_lengths" data_type: TYPE_INT32 dims: [ 1 ] reshape: { shape: [ ] } }
]
output [
  { name: "output_ids" data_type: TYPE_INT32 dims: [ -1, -1 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters: {
  key: "gpt_model_path"
  value: { string_value: "/models/llama-70b/1" }
}
parameters: {
  key: "kv_cache_free_gpu_mem_fraction"
  value: { string_value: "${kv_cache_free_gpu_mem_fraction}" }
}
"""


def render_var(name, **overrides):
    from ansible.plugins.loader import filter_loader
    filter_loader.add_directory(str(REPO / "filter_plugins"))
    loader, variables = _vars(**overrides)
    return Templar(loader=loader, variables=variables).template(trust_as_template("{{ %s }}" % name))


def _staged(text):
    return {"content": base64.b64encode(text.encode()).decode()}


def _top_fields(config):
    """name -> value of the fields outside every block (protobuf text format, one field per line)."""
    depth, fields = 0, {}
    for line in config.splitlines():
        if depth == 0 and re.match(r"^\w+\s*:\s*[^{\[]", line):
            key, value = line.split(":", 1)
            fields.setdefault(key.strip(), []).append(value.strip())
        depth += line.count("{") + line.count("[") - line.count("}") - line.count("]")
    return fields


def _block(config, name):
    match = re.search(r"(?m)^%s\s*:?\s*\{(.*?)^\}" % name, config, re.S)
    assert match, (name, config)
    return match.group(1)


def test_triton_loads_the_rendered_model_config():
    argv = exec_start(render_unit(inference_runtime_engine="triton"))
    assert flag(argv, "--model-config-name") == "inference-runtime"
    # Triton looks for <model directory>/configs/<name>.pbtxt; the model directory is the staged one
    assert render_var("_inference_runtime_triton_config", inference_runtime_engine="triton") == \
        "/var/lib/inference-runtime/models/llama-70b/configs/inference-runtime.pbtxt"


def test_triton_model_config_carries_the_batching_settings():
    config = render_var("_inference_runtime_triton_model_config", inference_runtime_engine="triton",
                        inference_runtime_max_batch_size=64, inference_runtime_batch_timeout_ms=100,
                        inference_runtime_gpu_memory_fraction=0.85,
                        __inference_runtime_triton_staged=_staged(TRITON_CONFIG))
    assert _top_fields(config)["max_batch_size"] == ["64"]
    batcher = _block(config, "dynamic_batching")
    assert re.findall(r"preferred_batch_size\s*:\s*\[([^\]]*)\]", batcher) == [" 64 "]
    assert re.findall(r"max_queue_delay_microseconds\s*:\s*(\S+)", batcher) == ["100000"]   # 100 ms
    assert "default_queue_policy { max_queue_size: 512 }" in batcher
    assert re.search(r'key: "kv_cache_free_gpu_mem_fraction"\s*value: \{\s*string_value: "0.85"', config)
    assert "${" not in config
    # everything else as staged: inputs, outputs, instances, the engine path, the transaction policy
    for kept in ('{ name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] allow_ragged_batch: true }',
                 'instance_group [ { count: 1 kind: KIND_CPU } ]', 'string_value: "/models/llama-70b/1"',
                 "decoupled: true"):
        assert kept in config


def test_triton_defaults_are_the_guides_batching():
    config = render_var("_inference_runtime_triton_model_config", inference_runtime_engine="triton",
                        __inference_runtime_triton_staged=_staged(TRITON_CONFIG))
    batcher = _block(config, "dynamic_batching")
    assert _top_fields(config)["max_batch_size"] == ["256"]
    assert "preferred_batch_size: [ 256 ]" in batcher and "max_queue_delay_microseconds: 100000" in batcher
    assert 'string_value: "0.9"' in config


sys.path.insert(0, str(REPO / "filter_plugins"))
import inference as inference_filters  # noqa: E402  (filter_plugins is not a package)


def test_triton_filter_replaces_numbers_and_adds_a_missing_batcher():
    filled = 'name: "m"\nmax_batch_size: 8\ndynamic_batching {\n  preferred_batch_size: [ 2, 4 ]\n' \
             '  max_queue_delay_microseconds: 500\n}\n'
    out = inference_filters.triton_model_config(filled, 32, 100000)
    assert _top_fields(out)["max_batch_size"] == ["32"]
    assert re.findall(r"preferred_batch_size[^\n]*", out) == ["preferred_batch_size: [ 32 ]"]
    assert re.findall(r"max_queue_delay_microseconds[^\n]*", out) == ["max_queue_delay_microseconds: 100000"]
    bare = inference_filters.triton_model_config('name: "m"\nmax_batch_size: 8  # max_batch_size: 2\n', 16, 2000,
                                                 {"batch_scheduler_policy": "max_utilization"})
    assert _top_fields(bare)["max_batch_size"] == ["16  # max_batch_size: 2"]
    assert "preferred_batch_size: [ 16 ]" in _block(bare, "dynamic_batching")
    assert re.search(r'key: "batch_scheduler_policy"\s*value: \{\s*string_value: "max_utilization"', bare)
    # idempotent: rendering the rendered configuration again changes nothing
    assert inference_filters.triton_model_config(out, 32, 100000) == out


@pytest.mark.parametrize("config,message", [
    ('name: "m"\nmax_batch_size: 0\n', "max_batch_size: 0 means the model does not batch"),
    ('name: "m"\n', "expected one max_batch_size field, found 0"),
    ('max_batch_size: 8\nsequence_batching { }\n', "the model is a sequence batcher"),
    ('max_batch_size: 8\nensemble_scheduling { step [ ] }\n', "the model is an ensemble"),
    ('max_batch_size: 8\nmodel_transaction_policy { decoupled: ${decoupled_mode} }\n',
     "${decoupled_mode} left unfilled"),
    ('max_batch_size: 8\ninput [ { name: "x" }\n', "unterminated '{' or '['"),
    ('', "the model configuration is empty"),
])
def test_triton_filter_rejects_what_it_cannot_batch(config, message):
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError) as error:
        inference_filters.triton_model_config(config, 16, 100000, path="/models/m/config.pbtxt")
    assert "triton_model_config(/models/m/config.pbtxt): " in str(error.value) and message in str(error.value)


def test_model_files_are_checksummed_by_one_find_per_directory():
    """find matches file names against one pattern; its results are looked up by path relative to the model."""
    files = {"config.json": "a" * 64, "weights/model-00001-of-00002.safetensors": "b" * 64,
             "weights/model-00002-of-00002.safetensors": "c" * 64, "tokenizer/config.json": "d" * 64}
    pattern = re.compile(render_var("_inference_runtime_model_file_pattern", inference_runtime_model_files=files))
    assert all(pattern.match(name) for name in ("config.json", "model-00002-of-00002.safetensors"))
    assert not any(pattern.match(name) for name in ("config.json.bak", "model-00003-of-00002.safetensors", "x"))
    found = {"files": [{"path": "/srv/m/config.json", "checksum": "a" * 64},
                       {"path": "/srv/m/weights/model-00001-of-00002.safetensors", "checksum": "b" * 64},
                       {"path": "/srv/m/weights"}]}
    expected = {"config.json": "a" * 64, "weights/model-00001-of-00002.safetensors": "b" * 64}
    assert inference_filters.inference_model_checksums(found, "/srv/m") == expected
    assert inference_filters.inference_model_checksums(found, "/srv/m/") == expected
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="expected an ansible.builtin.find result"):
        inference_filters.inference_model_checksums({"skipped": True}, "/srv/m")
