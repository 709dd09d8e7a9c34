#!/usr/bin/env python3
"""Lab-only inference engine: a small OpenAI-compatible HTTP service with the health and metrics contract of
the real engine presets (GET /health, GET /metrics, GET /v1/models, POST /v1/completions, streaming with
"stream": true). Python standard library only. Installed by the inference_runtime role only when
inference_runtime_engine is "lab"; never by default.

--fail-health is the "bad version" knob: the service starts but /health answers 503, so the rollout's health
gate fails and rollback is exercised. Every request is appended to --request-log as one JSON line with the
served version and the client address, so a test can prove which version served which client.
"""

import argparse
import hashlib
import json
import os
import signal
import socket
import sys
import threading
import time

# vLLM's end-to-end request latency buckets (seconds), which TensorRT-LLM's collector also uses.
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Engine:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.connections, self.stopping = set(), False  # open client connections, and whether a stop began
        self.counts = {}
        self.tokens = 0
        self.e2e = [0] * len(E2E_BUCKETS)  # per bucket, not cumulative
        self.e2e_count, self.e2e_sum = 0, 0.0
        self.started = time.time()
        self.log = open(args.request_log, "a", buffering=1) if args.request_log else None
        model = args.model
        if not os.path.isdir(model):
            raise SystemExit("lab_engine: model directory %s does not exist" % model)
        digest = hashlib.sha256()
        for root, dirs, files in os.walk(model):
            dirs.sort()
            for name in sorted(files):
                with open(os.path.join(root, name), "rb") as handle:
                    digest.update(handle.read())
        self.model_digest = digest.hexdigest()

    def record(self, method, path, status, client):
        with self.lock:
            key = (path, str(status))
            self.counts[key] = self.counts.get(key, 0) + 1
            if self.log:
                self.log.write(json.dumps({"t": round(time.time(), 3), "version": self.args.version,
                                           "method": method, "path": path, "status": status,
                                           "client": client}) + "\n")

    def observe(self, seconds):
        """One completed completion request's end-to-end latency, into the histogram."""
        with self.lock:
            self.e2e_count += 1
            self.e2e_sum += seconds
            for i, bound in enumerate(E2E_BUCKETS):
                if seconds <= bound:
                    self.e2e[i] += 1
                    break

    def metrics(self):
        lines = ["# HELP lab_engine_requests_total Requests served, by path and status.",
                 "# TYPE lab_engine_requests_total counter"]
        with self.lock:
            for (path, status), count in sorted(self.counts.items()):
                lines.append('lab_engine_requests_total{version="%s",path="%s",status="%s"} %d'
                             % (self.args.version, path, status, count))
            tokens = self.tokens
            buckets, count, total = list(self.e2e), self.e2e_count, self.e2e_sum
        model = self.args.served_model_name
        lines += ["# HELP vllm:generation_tokens_total Generated tokens.",
                  "# TYPE vllm:generation_tokens_total counter",
                  'vllm:generation_tokens_total{model_name="%s"} %d' % (model, tokens),
                  "# HELP vllm:e2e_request_latency_seconds Histogram of end to end request latency in seconds.",
                  "# TYPE vllm:e2e_request_latency_seconds histogram"]
        cumulative = 0
        for bound, n in zip(E2E_BUCKETS, buckets):
            cumulative += n
            lines.append('vllm:e2e_request_latency_seconds_bucket{le="%s",model_name="%s"} %d' % (bound, model, cumulative))
        lines += ['vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="%s"} %d' % (model, count),
                  'vllm:e2e_request_latency_seconds_count{model_name="%s"} %d' % (model, count),
                  'vllm:e2e_request_latency_seconds_sum{model_name="%s"} %.6f' % (model, total),
                  "# HELP lab_engine_info Engine build and batching settings.",
                  "# TYPE lab_engine_info gauge",
                  'lab_engine_info{version="%s",tensor_parallel_size="%d",max_batch_size="%d",'
                  'max_tokens_per_batch="%d",quantization="%s"} 1'
                  % (self.args.version, self.args.tensor_parallel_size, self.args.max_batch_size,
                     self.args.max_tokens_per_batch, self.args.quantization)]
        return "\n".join(lines) + "\n"


def make_handler(engine):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "lab-engine/" + engine.args.version

        def log_message(self, fmt, *args):  # the request log replaces the stderr access log
            pass

        # A stop (SIGTERM) lets in-flight requests finish and closes idle keep-alive connections (Prometheus',
        # nginx's), as uvicorn does for vLLM: otherwise server_close() waits for clients that never hang up.
        def setup(self):
            super().setup()
            self.busy = False
            with engine.lock:
                engine.connections.add(self)

        def finish(self):
            with engine.lock:
                engine.connections.discard(self)
            super().finish()

        def parse_request(self):
            self.busy = True
            return super().parse_request()

        def handle_one_request(self):
            super().handle_one_request()
            self.busy = False
            if engine.stopping:
                self.close_connection = True

        def _client(self):  # the direct peer: the load balancer for proxied traffic
            return self.client_address[0]

        def _send(self, status, body, ctype="application/json"):
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            engine.record(self.command, self.path.split("?")[0], status, self._client())

        def do_GET(self):  # noqa: N802 (http.server's naming)
            path = self.path.split("?")[0]
            if path == "/health":
                if engine.args.fail_health:
                    self._send(503, {"status": "unhealthy", "version": engine.args.version})
                else:
                    self._send(200, {"status": "ok", "version": engine.args.version,
                                     "model_sha256": engine.model_digest})
            elif path == "/metrics":
                self._send(200, engine.metrics(), "text/plain; version=0.0.4")
            elif path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": engine.args.served_model_name,
                                                             "object": "model", "owned_by": "lab",
                                                             "version": engine.args.version}]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self):  # noqa: N802
            started = time.monotonic()
            path = self.path.split("?")[0]
            length = int(self.headers.get("Content-Length") or 0)
            try:
                request = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send(400, {"error": "body is not JSON"})
                return
            if path != "/v1/completions":
                self._send(404, {"error": "not found"})
                return
            if request.get("model", engine.args.served_model_name) != engine.args.served_model_name:
                self._send(404, {"error": "unknown model %s" % request.get("model")})
                return
            if engine.args.fail_health:
                self._send(503, {"error": "engine unhealthy"})
                return
            count = max(1, min(int(request.get("max_tokens", 8)), 64))
            words = ["tok%d" % i for i in range(count)]
            with engine.lock:
                engine.tokens += count
            ident = "cmpl-%d" % int(time.time() * 1000)
            if request.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for word in words + [None]:
                    chunk = ("data: [DONE]\n\n" if word is None else "data: %s\n\n" % json.dumps(
                        {"id": ident, "object": "text_completion", "model": engine.args.served_model_name,
                         "choices": [{"index": 0, "text": " " + word, "finish_reason": None}]}))
                    data = chunk.encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                engine.record("POST", path, 200, self._client())
                engine.observe(time.monotonic() - started)
                return
            self._send(200, {"id": ident, "object": "text_completion", "created": int(time.time()),
                             "model": engine.args.served_model_name, "system_fingerprint": engine.args.version,
                             "choices": [{"index": 0, "text": " ".join(words), "finish_reason": "length"}],
                             "usage": {"prompt_tokens": len(str(request.get("prompt", "")).split()),
                                       "completion_tokens": count}})
            engine.observe(time.monotonic() - started)

    return Handler


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", required=True, help="staged model directory")
    parser.add_argument("--served-model-name", default="model")
    parser.add_argument("--version", required=True)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--max-batch-size", type=int, default=256)
    parser.add_argument("--max-tokens-per-batch", type=int, default=8192)
    parser.add_argument("--batch-timeout-ms", type=int, default=100)
    parser.add_argument("--quantization", default="none")
    parser.add_argument("--gpu-memory-fraction", type=float, default=0.9)
    parser.add_argument("--request-log", default="")
    parser.add_argument("--fail-health", action="store_true", help="bad version: /health answers 503")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    engine = Engine(args)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(engine))
    server.daemon_threads = False  # server_close() waits for in-flight requests

    def stop(_signum, _frame):
        def close():
            with engine.lock:
                engine.stopping = True
                idle = [h for h in engine.connections if not h.busy]
            for handler in idle:
                try:
                    handler.connection.shutdown(socket.SHUT_RD)  # its read of the next request ends at once
                except OSError:
                    pass
            server.shutdown()
        threading.Thread(target=close, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("lab_engine %s serving %s on %s:%d%s" % (args.version, args.served_model_name, args.host, args.port,
                                                  " (fail-health)" if args.fail_health else ""), flush=True)
    server.serve_forever()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
