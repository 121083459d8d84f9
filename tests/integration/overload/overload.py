#!/usr/bin/env python3
"""Overload test (issue 8): more requests and connections than troupe-serve's limits allow.

Usage: overload.py PATH/TO/troupe-serve [--duration S]

troupe-serve runs stories260k on the CPU with small limits: queue-depth 6 (generate requests in
flight; beyond: 429, or an "overloaded" error frame on a WebSocket) and max-connections 16 (beyond:
503 at accept). The script
  1. measures the latency of requests at the limit: 3 rounds of 6 concurrent greedy completions,
     the slowest request of the 3 rounds is the baseline;
  2. floods it for --duration seconds: 12 HTTP clients posting completions back to back on fresh
     connections, and one WebSocket connection sending bursts of 12 generate frames;
  3. holds every connection the server allows open, opens 8 more, gets /health on each held one,
     and meanwhile streams one request over a WebSocket opened before the flood;
  4. after the load: waits for the engine to settle, measures the baseline again, opens as many
     connections as allowed and gets /health on each.
It fails when:
  - a response is anything but 200, 429 or 503, or a 429/503 lacks Retry-After or an OpenAI error
    body with its code, or a WebSocket error frame is not "overloaded";
  - a refusal is slow: P99 over 0.2 s or any over 0.8 s from the request's first byte (refusals never
    wait for the engine), or a connection over the limit is not refused within 0.25 s of its connect;
  - not exactly the 8 connections over max-connections are refused, or a held one does not answer;
  - an admitted request ends later than 2x the baseline's slowest + 0.5 s, or gives other text than
    the same prompt alone (greedy);
  - no request at all was refused, or none admitted, during the flood;
  - after the load anything above does not work as before, or the server does not stop cleanly.
Prints a report; exits 1 when a check fails.
"""
import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time

import websockets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from troupe_serve import MODEL, Failure, Server, metric, metrics, read_body, read_head  # noqa: E402

QUEUE_DEPTH = 6
MAX_CONNECTIONS = 16
MAX_TOKENS = 160
PROMPTS = ["Once upon a time", "The little dog", "Lily wanted to", "One day, a bird", "Tom and his mom",
           "There was a big tree"]
# Refusal latency in the flood, from the request's first byte: measured on the 2-core dev machine,
# under load from parallel builds (load average 6-7), over 14 runs: P99 17-68 ms, max 49-287 ms
# (median 1.1-4 ms). The bounds are about 3x those; refusals that waited for a request to finish (one
# at the limit takes 0.16-0.6 s here) would break them.
REFUSAL_P99_S = 0.2
REFUSAL_MAX_S = 0.8
# A connection over max-connections is answered 503 at accept, before any request: one that sends
# nothing within this long counts as held (measured: every refusal within 13 ms, mostly under 1 ms).
CONNECTION_REFUSAL_S = 0.25
HTTP_CLIENTS = 12
# The baseline is the slowest request over this many rounds of QUEUE_DEPTH concurrent requests, run
# before the flood. With one round, a round that happened to be fast (slowest 0.155-0.26 s on the
# 2-core dev machine under build load) made the admitted-request bound (2x baseline + 0.5 s) fail now
# and then though nothing waited behind refusals. The bound itself is unchanged: a request admitted
# in the flood must still finish within 2x what one at the limit takes on this machine, + 0.5 s.
BASELINE_ROUNDS = 3
WS_BURST = 12
EXTRA_CONNECTIONS = 8


def body_for(prompt):
    return {"model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}


class Outcome:
    def __init__(self, kind, prompt):
        self.kind = kind  # http | ws
        self.prompt = prompt
        self.status = None  # HTTP status, or 200 (done) / 429 (error frame) for a WebSocket request
        self.code = None
        self.retry_after = None
        self.text = ""
        self.latency = None  # first byte sent -> response (refusal) or last byte (admitted)
        self.problem = None


async def post_completion(port, prompt, timeout=120.0):
    """One POST /v1/completions on a fresh connection, timed from its first byte."""
    out = Outcome("http", prompt)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        data = json.dumps(body_for(prompt)).encode()
        start = time.monotonic()
        writer.write((f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                      f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data)
        await writer.drain()
        status, headers = await asyncio.wait_for(read_head(reader), timeout)
        payload = await asyncio.wait_for(read_body(reader, headers), timeout)
        out.latency = time.monotonic() - start
        out.status = status
        out.retry_after = headers.get("retry-after")
        parsed = json.loads(payload)
        if status == 200:
            out.text = parsed["choices"][0]["text"]
        else:
            out.code = parsed.get("error", {}).get("code")
    except (ConnectionError, asyncio.IncompleteReadError, ValueError, KeyError, asyncio.TimeoutError) as e:
        out.problem = f"{type(e).__name__}: {e}"
    finally:
        writer.close()
    return out


async def get_health(reader, writer):
    writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await writer.drain()
    status, headers = await asyncio.wait_for(read_head(reader), 10)
    await read_body(reader, headers)
    return status


class Run:
    def __init__(self, port):
        self.port = port
        self.reference = {}  # prompt -> text alone
        self.baseline_max = None
        self.flood = []  # outcomes during the flood
        self.failures = []
        self.report = {}

    def fail(self, message):
        self.failures.append(message)

    async def references(self):
        for p in PROMPTS:
            o = await post_completion(self.port, p)
            if o.status != 200:
                raise Failure(f"reference request for {p!r}: status {o.status} {o.problem or ''}")
            self.reference[p] = o.text

    async def at_the_limit(self, label):
        """BASELINE_ROUNDS rounds of QUEUE_DEPTH concurrent requests: all admitted, the same text as
        alone; returns the slowest request of each round."""
        slowest = []
        for _ in range(BASELINE_ROUNDS):
            outs = await asyncio.gather(*(post_completion(self.port, PROMPTS[i % len(PROMPTS)])
                                          for i in range(QUEUE_DEPTH)))
            for o in outs:
                if o.status != 200:
                    self.fail(f"{label}: a request at the limit got {o.status} {o.code} {o.problem or ''}")
                elif o.text != self.reference[o.prompt]:
                    self.fail(f"{label}: {o.prompt!r} gave other text than alone")
            latencies = [o.latency for o in outs if o.latency is not None]
            if not latencies:
                raise Failure(f"{label}: no request at the limit got an answer")
            slowest.append(max(latencies))
        return slowest

    async def http_flooder(self, deadline):
        i = 0
        while time.monotonic() < deadline:
            o = await post_completion(self.port, PROMPTS[i % len(PROMPTS)])
            self.flood.append(o)
            i += 1
            if o.status != 200:
                # Far sooner than Retry-After: a flood, yet one that leaves this machine's two
                # cores to the server rather than to this script's event loop.
                await asyncio.sleep(0.02)

    async def ws_flooder(self, ws, deadline):
        burst = 0
        while time.monotonic() < deadline:
            sent = {}
            for k in range(WS_BURST):
                rid = f"b{burst}-{k}"
                o = Outcome("ws", PROMPTS[k % len(PROMPTS)])
                sent[rid] = (o, time.monotonic())
                await ws.send(json.dumps({"type": "generate", "id": rid, "prompt": o.prompt,
                                          "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}))
            open_ids = set(sent)
            while open_ids:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 120))
                rid = frame.get("id")
                if rid not in sent:
                    self.fail(f"ws flood: a frame for unknown id {rid!r}: {frame}")
                    continue
                o, start = sent[rid]
                if frame["type"] == "delta":
                    o.text += frame.get("text", "")
                elif frame["type"] in ("done", "error"):
                    o.latency = time.monotonic() - start
                    o.status = 200 if frame["type"] == "done" else 429
                    o.code = frame.get("code")
                    open_ids.discard(rid)
                    self.flood.append(o)
            burst += 1

    async def hold_connections(self):
        """Every connection the server allows held open (one is the WebSocket already open), then
        EXTRA_CONNECTIONS more: those get 503 at once. Returns the held ones and the refusals."""
        held, refused = [], []
        for _ in range(MAX_CONNECTIONS - 1 + EXTRA_CONNECTIONS):
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            start = time.monotonic()
            try:
                # A refused connection is answered without a request; an accepted one waits for one.
                status, headers = await asyncio.wait_for(read_head(reader), CONNECTION_REFUSAL_S)
                payload = await read_body(reader, headers)
                o = Outcome("conn", "")
                o.status, o.latency = status, time.monotonic() - start
                o.retry_after = headers.get("retry-after")
                o.code = json.loads(payload).get("error", {}).get("code")
                refused.append(o)
                writer.close()
            except asyncio.TimeoutError:
                held.append((reader, writer))
        return held, refused

    async def connection_flood(self):
        async with websockets.connect(f"ws://127.0.0.1:{self.port}/v1/stream", max_size=None) as ws:
            # Accepted connections count when the server gets to them: let it see this one first.
            await ws.ping()
            held, refused = await self.hold_connections()
            self.report["connections_held"] = len(held) + 1
            self.report["connections_refused"] = len(refused)
            # Exact: the server counts a connection at accept, the held ones were accepted in order
            # before the extra ones, and the flood's connections freed their slots when they closed.
            if len(refused) != EXTRA_CONNECTIONS or len(held) != MAX_CONNECTIONS - 1:
                self.fail(f"connection flood: {len(refused)} of {MAX_CONNECTIONS - 1 + EXTRA_CONNECTIONS} new "
                          f"connections refused (503 at accept within {CONNECTION_REFUSAL_S} s), {len(held)} held; "
                          f"want exactly the {EXTRA_CONNECTIONS} over max-connections {MAX_CONNECTIONS} refused")
            for o in refused:
                if o.status != 503 or o.code != "unavailable" or not o.retry_after:
                    self.fail(f"connection flood: refusal {o.status} code {o.code} Retry-After {o.retry_after}")
            self.report["connection_refusal_max_ms"] = round(max((o.latency for o in refused), default=0) * 1000, 2)
            # The WebSocket opened before the flood still streams, as fast as before.
            start = time.monotonic()
            await ws.send(json.dumps({"type": "generate", "id": 1, "prompt": PROMPTS[0], "max_tokens": MAX_TOKENS,
                                      "temperature": 0, "ignore_eos": True}))
            text = ""
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
                if frame["type"] == "delta":
                    text += frame["text"]
                elif frame["type"] == "done":
                    break
                else:
                    self.fail(f"connection flood: the open WebSocket got {frame}")
                    break
            e2e = time.monotonic() - start
            self.report["ws_during_connection_flood_s"] = round(e2e, 3)
            if text != self.reference[PROMPTS[0]]:
                self.fail("connection flood: the open WebSocket's request gave other text than alone")
            if e2e > 2 * self.baseline_max + 0.5:
                self.fail(f"connection flood: the open WebSocket's request took {e2e:.2f} s "
                          f"(bound {2 * self.baseline_max + 0.5:.2f} s)")
            # Every held connection is served while the limit is full.
            statuses = []
            for reader, writer in held:
                try:
                    statuses.append(await get_health(reader, writer))
                except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
                    statuses.append(type(e).__name__)
            if any(st != 200 for st in statuses):
                self.fail(f"connection flood: /health on the {len(held)} held connections gave {statuses}")
            for _, writer in held:
                writer.close()

    async def settle(self, timeout=20.0):
        end = time.monotonic() + timeout
        while True:
            m = await metrics(self.port)
            busy = sum(metric(m, f"troupe:num_requests_{g}") for g in ("running", "waiting", "swapped"))
            if busy == 0 and metric(m, "troupe:kv_cache_usage_perc") == 0:
                return m
            if time.monotonic() > end:
                raise Failure(f"the engine did not settle after the load: {busy} requests, "
                              f"kv_cache_usage_perc {metric(m, 'troupe:kv_cache_usage_perc')}")
            await asyncio.sleep(0.1)

    def check_flood(self):
        admitted = [o for o in self.flood if o.status == 200]
        refused = [o for o in self.flood if o.status in (429, 503)]
        other = [o for o in self.flood if o.status not in (200, 429, 503)]
        for o in other:
            self.fail(f"flood: {o.kind} request got status {o.status} {o.code} {o.problem or ''}")
        for o in refused:
            if o.kind == "ws":
                if o.code != "overloaded":
                    self.fail(f"flood: a WebSocket refusal with code {o.code!r} (expected overloaded)")
            elif not o.retry_after or o.code not in ("rate_limit_exceeded", "unavailable"):
                self.fail(f"flood: HTTP {o.status} with code {o.code!r}, Retry-After {o.retry_after!r}")
        for o in admitted:
            if o.text != self.reference[o.prompt]:
                self.fail(f"flood: an admitted {o.kind} request for {o.prompt!r} gave other text than alone")
        if not admitted or not refused:
            self.fail(f"flood: {len(admitted)} admitted and {len(refused)} refused; both should happen")
        bound = 2 * self.baseline_max + 0.5
        slow = [o for o in admitted if o.latency > bound]
        if slow:
            self.fail(f"flood: {len(slow)} admitted requests took longer than {bound:.2f} s "
                      f"(slowest {max(o.latency for o in slow):.2f} s)")
        lat = sorted(o.latency for o in refused)
        if lat:
            p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
            if p99 > REFUSAL_P99_S or lat[-1] > REFUSAL_MAX_S:
                self.fail(f"flood: refusals too slow: P99 {p99 * 1000:.0f} ms, max {lat[-1] * 1000:.0f} ms "
                          f"(bounds {REFUSAL_P99_S * 1000:.0f} / {REFUSAL_MAX_S * 1000:.0f} ms)")
            self.report["refusal_ms_p50_p99_max"] = [round(statistics.median(lat) * 1000, 1),
                                                     round(p99 * 1000, 1), round(lat[-1] * 1000, 1)]
        adm = sorted(o.latency for o in admitted)
        if adm:
            self.report["admitted_e2e_s_p50_max"] = [round(statistics.median(adm), 3), round(adm[-1], 3)]
        self.report["admitted_bound_s"] = round(bound, 3)
        by = {}
        for o in self.flood:
            key = f"{o.kind} {o.status}"
            by[key] = by.get(key, 0) + 1
        self.report["flood_requests"] = dict(sorted(by.items()))

    async def recovery(self):
        await self.settle()
        # Measured as the baseline was (slowest over BASELINE_ROUNDS rounds), so the two compare.
        rounds = await self.at_the_limit("after the load")
        again = max(rounds)
        self.report["baseline_after_rounds_s"] = [round(x, 3) for x in rounds]
        if again > 2 * self.baseline_max + 0.5:
            self.fail(f"after the load: requests at the limit took {again:.2f} s "
                      f"(before: {self.baseline_max:.2f} s)")
        conns = [await asyncio.open_connection("127.0.0.1", self.port) for _ in range(MAX_CONNECTIONS - 1)]
        statuses = [await get_health(r, w) for r, w in conns]
        for _, w in conns:
            w.close()
        if any(s != 200 for s in statuses):
            self.fail(f"after the load: /health on {MAX_CONNECTIONS - 1} connections gave {statuses}")
        await self.settle()

    async def run(self, duration):
        await self.references()
        rounds = await self.at_the_limit("baseline")
        self.baseline_max = max(rounds)
        self.report["baseline_rounds_s"] = [round(x, 3) for x in rounds]
        self.report["baseline_max_s"] = round(self.baseline_max, 3)
        # The WebSocket connects first: once the flood runs, a new connection may meet max-connections.
        async with websockets.connect(f"ws://127.0.0.1:{self.port}/v1/stream", max_size=None) as ws:
            deadline = time.monotonic() + duration
            await asyncio.gather(*(self.http_flooder(deadline) for _ in range(HTTP_CLIENTS)),
                                 self.ws_flooder(ws, deadline))
        self.check_flood()
        await self.settle()
        await self.connection_flood()
        await self.recovery()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("serve")
    ap.add_argument("--duration", type=float, default=10.0)
    args = ap.parse_args()
    log_path = os.path.join(tempfile.gettempdir(), f"troupe-overload-{os.getpid()}.log")
    server = Server(args.serve, "overload", log_path,
                    [f"--server.queue-depth={QUEUE_DEPTH}", f"--server.max-connections={MAX_CONNECTIONS}",
                     "--engine.max-num-seqs=3"])
    run = None
    try:
        server.wait_listening()
        run = Run(server.port)
        asyncio.run(run.run(args.duration))
        if server.proc.poll() is not None:
            run.fail(f"troupe-serve died, status {server.proc.returncode}")
    except Failure as e:
        run = run or Run(None)
        run.fail(str(e))
    finally:
        stopped = server.stop()
    if stopped:
        run.fail(stopped)
    print(json.dumps(run.report, indent=1))
    if run.failures:
        print("\nFAILED:\n  " + "\n  ".join(run.failures[:30]), file=sys.stderr)
        print(f"server log: {log_path}\n{server.tail()}", file=sys.stderr)
        sys.exit(1)
    print("overload: OK")


if __name__ == "__main__":
    main()
