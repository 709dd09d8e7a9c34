"""The lab-only files lab/image/fresh.sh puts in node images: the bytecode cache of Ansible's module payloads
gives back exactly what Python compiles, under this run's file name."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "lab" / "image" / "overlay"
SOURCE = b"def outer():\n    def inner():\n        return 41 + 1\n    return inner()\nVALUE = outer()\n"


def load_cache(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "gpulab_bytecode_cache_under_test",
        OVERLAY / "usr" / "lib" / "python3" / "dist-packages" / "gpulab_bytecode_cache.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "_DIR", str(tmp_path / "cache"))
    return module


def run(code):
    namespace = {}
    exec(code, namespace)  # noqa: S102 - the test's own source
    return namespace["VALUE"]


def test_second_compile_comes_from_the_cache_under_the_new_file_name(tmp_path, monkeypatch):
    cache = load_cache(tmp_path, monkeypatch)
    first = cache._compile_source("/tmp/ansible_ping_payload_a/x.zip/mod.py", SOURCE)
    entries = list((tmp_path / "cache").iterdir())
    assert len(entries) == 1 and entries[0].name.endswith("." + sys.implementation.cache_tag)
    calls = []
    monkeypatch.setattr(cache, "_compile", lambda *a: calls.append(a))
    second = cache._compile_source("/tmp/ansible_ping_payload_b/x.zip/mod.py", SOURCE)
    assert calls == []  # not compiled again
    assert run(first) == run(second) == 42
    assert second.co_filename == "/tmp/ansible_ping_payload_b/x.zip/mod.py"
    inner = [c for c in second.co_consts if hasattr(c, "co_filename")][0]
    assert inner.co_filename == second.co_filename  # nested code objects renamed too
    assert second.co_code == first.co_code


def test_a_damaged_entry_is_compiled_again(tmp_path, monkeypatch):
    cache = load_cache(tmp_path, monkeypatch)
    cache._compile_source("/a/mod.py", SOURCE)
    entry = next((tmp_path / "cache").iterdir())
    entry.write_bytes(b"\x00garbage")
    code = cache._compile_source("/b/mod.py", SOURCE)
    assert run(code) == 42 and code.co_filename == "/b/mod.py"
    assert entry.read_bytes() != b"\x00garbage"  # rewritten


def test_a_different_source_is_a_different_entry(tmp_path, monkeypatch):
    cache = load_cache(tmp_path, monkeypatch)
    cache._compile_source("/a/mod.py", SOURCE)
    code = cache._compile_source("/a/mod.py", SOURCE.replace(b"41", b"40"))
    assert run(code) == 41 and len(list((tmp_path / "cache").iterdir())) == 2

