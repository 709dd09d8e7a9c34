#!/usr/bin/env python3
"""Bounded load generator for the lab: worker threads POST /v1/completions through the load balancer until
--max-requests (at most 2000) are sent, --max-seconds pass, or --stop-file appears; then writes a JSON summary
(ok, failed, status codes, first errors, and its own count of what the KPIs measure: completion tokens received
and the P99 of the successful requests' latencies, nearest rank). Python standard library only; lab and test use only."""

import argparse
import json
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request

HARD_LIMIT = 2000


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--cacert", default="")
    parser.add_argument("--model", default="model")
    parser.add_argument("--max-requests", type=int, default=1000)
    parser.add_argument("--max-seconds", type=float, default=120)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--interval", type=float, default=0.05, help="pause between a thread's requests")
    parser.add_argument("--stop-file", default="")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    limit = min(args.max_requests, HARD_LIMIT)
    context = ssl.create_default_context(cafile=args.cacert or None)
    body = json.dumps({"model": args.model, "prompt": "warm", "max_tokens": 4}).encode()
    lock = threading.Lock()
    state = {"sent": 0, "ok": 0, "failed": 0, "codes": {}, "errors": [], "tokens": 0}
    latencies = []
    deadline = time.monotonic() + args.max_seconds

    def take():
        with lock:
            if state["sent"] >= limit or time.monotonic() > deadline:
                return False
            if args.stop_file and os.path.exists(args.stop_file):
                return False
            state["sent"] += 1
            return True

    def worker():
        while take():
            request = urllib.request.Request(args.url, data=body, headers={"Content-Type": "application/json"})
            started, tokens = time.monotonic(), 0
            try:
                with urllib.request.urlopen(request, timeout=30, context=context) as response:
                    payload = json.loads(response.read())
                    code, good = response.status, bool(payload.get("choices"))
                    tokens = int((payload.get("usage") or {}).get("completion_tokens") or 0)
            except urllib.error.HTTPError as exc:
                code, good = exc.code, False
            except Exception as exc:  # connection refused/reset, TLS, timeout: all count as failures
                code, good = "%s(%s)" % (type(exc).__name__, getattr(exc, "reason", exc)), False
            with lock:
                state["codes"][str(code)] = state["codes"].get(str(code), 0) + 1
                state["ok" if good else "failed"] += 1
                if good:
                    state["tokens"] += tokens
                    latencies.append(time.monotonic() - started)
                if not good and len(state["errors"]) < 10:
                    state["errors"].append("%.3f %s" % (time.time(), code))
            time.sleep(args.interval)

    started = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    state["seconds"] = round(time.monotonic() - started, 1)
    latencies.sort()
    state["latency_p99_seconds"] = latencies[max(0, -(-99 * len(latencies) // 100) - 1)] if latencies else None
    with open(args.out, "w") as handle:
        json.dump(state, handle)
    print(json.dumps(state))
    return 0


if __name__ == "__main__":
    sys.exit(main())
