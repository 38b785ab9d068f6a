#!/usr/bin/env python3
"""Load test of an OpenAI-compatible server (mlx-aot serve, mlx_lm.server, ...) on
loopback: at each concurrency C, C clients each send M streamed completions one after
another. Every stream is checked (chunks parse, one finish_reason, usage, `[DONE]`);
prints a table (aggregate decode tok/s, ratio to C=1, time to first token p50/p99) and
writes JSON. Standard library only, so it runs on a GPU host as it is.

  python3 scripts/bench-serve.py --url http://127.0.0.1:8080 --concurrency 1,4,16 \\
      --requests 4 --max-tokens 64 --json out.json
"""

import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse


LENIENT = False


def stream_once(url, model, prompt, max_tokens):
    """One streamed completion: (ttft s, completion tokens, total s) or raises."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
    }
    if model:
        body["model"] = model
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
    ttft = None
    pieces = 0
    finish = []
    usage = None
    done = False
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    done = True
                    continue
                if done:
                    raise RuntimeError("data after [DONE]")
                obj = json.loads(data)
                if "error" in obj:
                    raise RuntimeError(f"error event: {obj['error']}")
                if obj.get("usage"):
                    usage = obj["usage"]
                for c in obj.get("choices", []):
                    text = c.get("text") or (c.get("delta") or {}).get("content")
                    if text:
                        pieces += 1
                        if ttft is None:
                            ttft = time.perf_counter() - start
                    if c.get("finish_reason"):
                        finish.append(c["finish_reason"])
    total = time.perf_counter() - start
    conn.close()
    if LENIENT and usage is None:
        # A server without stream usage: one text chunk per token.
        usage = {"completion_tokens": pieces}
    if not done or (len(finish) != 1 and not LENIENT) or usage is None:
        raise RuntimeError(f"malformed stream: done={done} finish={finish} usage={usage}")
    return (ttft if ttft is not None else total), usage["completion_tokens"], total


def level(url, model, concurrency, requests, max_tokens):
    results, errors = [], []
    lock = threading.Lock()

    def client(i):
        for j in range(requests):
            prompt = f"t{5 + i % 50} t{9 + j % 40} t{13 + (i * 7 + j) % 60}"
            try:
                r = stream_once(url, model, prompt, max_tokens)
                with lock:
                    results.append(r)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                with lock:
                    errors.append(str(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    ttfts = sorted(r[0] for r in results)
    tokens = sum(r[1] for r in results)

    def pct(p):
        return ttfts[min(len(ttfts) - 1, int(round(p * (len(ttfts) - 1))))] if ttfts else None

    return {
        "concurrency": concurrency,
        "requests": concurrency * requests,
        "completed": len(results),
        "errors": errors,
        "completion_tokens": tokens,
        "wall_s": wall,
        "tok_s": tokens / wall if wall > 0 else 0.0,
        "ttft_p50_ms": None if pct(0.5) is None else pct(0.5) * 1e3,
        "ttft_p99_ms": None if pct(0.99) is None else pct(0.99) * 1e3,
        "per_stream_tok_s": statistics.median(r[1] / r[2] for r in results) if results else None,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default=None)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", default=None)
    ap.add_argument("--lenient", action="store_true",
                    help="another server: count text chunks when it sends no usage")
    a = ap.parse_args()
    global LENIENT
    LENIENT = a.lenient
    # One request first: kernels compiled, caches warm.
    stream_once(a.url, a.model, "t5 t6", 8)
    rows = [level(a.url, a.model, int(c), a.requests, a.max_tokens)
            for c in a.concurrency.split(",")]
    base = rows[0]["tok_s"] or 1.0
    print(f"{a.label} {a.url}  max_tokens {a.max_tokens}, {a.requests} requests per client")
    print(f"{'clients':>7} {'done':>6} {'errors':>6} {'tok/s':>9} {'x C=1':>6} "
          f"{'TTFT p50 ms':>12} {'TTFT p99 ms':>12}")
    for r in rows:
        print(f"{r['concurrency']:>7} {r['completed']:>6} {len(r['errors']):>6} "
              f"{r['tok_s']:>9.1f} {r['tok_s'] / base:>6.2f} "
              f"{r['ttft_p50_ms'] or 0:>12.1f} {r['ttft_p99_ms'] or 0:>12.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"label": a.label, "url": a.url, "max_tokens": a.max_tokens,
                       "requests_per_client": a.requests, "levels": rows}, f, indent=1)
    if any(r["errors"] for r in rows):
        for r in rows:
            for e in r["errors"][:3]:
                print("error:", e)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
