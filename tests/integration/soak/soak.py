#!/usr/bin/env python3
"""Soak test (issue 8): troupe-serve under sustained mixed load with a KV pool small
enough that sequences are preempted all the time, once per preemption mode, then once more with
faults injected.

Usage: soak.py PATH/TO/troupe-serve [--duration S] [--clients N] [--seed N] [--modes swap,recompute,faults]

For each mode (swap, recompute, then faults: swap preemption with the [debug] fault points armed,
FAULT_ARGS) it starts its own troupe-serve (stories260k on the CPU,
48 device blocks of 16 tokens, priority scheduling, n-gram speculation) and for --duration seconds
runs concurrent clients on 127.0.0.1: WebSocket /v1/stream (several requests multiplexed per
connection, cancels, connections dropped without a close frame) and POST /v1/completions (JSON and
SSE, some dropped mid-stream), with random prompts, lengths, temperatures, seeds, priorities and
num_speculative_tokens. Then it checks:
  - every request ended: done with a finish_reason, an error frame/status, or our own cancel or
    disconnect; none waits past the per-request timeout;
  - no unexplained error (documented overload refusals are counted apart; in the faults mode so are
    step_failed and tokenizer_error, and every kind of recovered failure must show in /metrics);
  - stream shape: deltas then one done, usage.completion_tokens = tokens streamed, "length" means
    exactly max_tokens (prompts are short enough that the context never caps it);
  - a sample of finished requests, rerun one at a time after the load, give the same tokens
    (WebSocket) or text (HTTP): greedy and seeded sampled requests alike, whatever their
    num_speculative_tokens (n-gram drafts are verified with the plain sampler's own draws, so where
    a sequence speculated, which preemption and batching decide, changes none of its tokens);
  - /metrics after a settle: kv_cache_usage_perc 0 and cpu_cache_usage_perc 0 (every device and
    every host (swap) block free), running/waiting/swapped 0, and at least one preemption of the
    run's mode;
  - VmRSS of the server after warm-up (20% of the duration) and at the end: growth at most
    max(25%, 64 MiB);
  - the server stops cleanly on SIGTERM.
Prints a report per mode; exits 1 when a check fails.
"""
import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time

import websockets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from troupe_serve import (MODEL, ROOT, Failure, Server, body_lines, http_request, metric, metrics,  # noqa: E402
                          read_body, read_head)

CONTEXT = 512
NUM_DEVICE_BLOCKS = 48  # 768 tokens: one full-context sequence (32 blocks) fits, a few busy ones do not
REQUEST_TIMEOUT_S = 60.0  # a request not ended by then (from its send) is a hang; they take seconds
SETTLE_TIMEOUT_S = 15.0
RSS_BOUND_FRACTION = 0.25
RSS_BOUND_BYTES = 64 << 20
# Block usage per KV tier on /metrics: both must be back to 0 once the engine is idle.
KV_USAGE = {"troupe:kv_cache_usage_perc": "device", "troupe:cpu_cache_usage_perc": "host (swap)"}
EXPLAINED_WS_CODES = {"overloaded", "too_many_requests"}
EXPLAINED_HTTP_STATUS = {429, 503}
# The faults mode: troupe-serve with [debug] fault injection on (rates for a 45 s run of about 10k steps:
# a few crashed and failed steps, many failed swap copies and proposals, a few failed decodes). Requests
# a fault touched end with one of FAULT_CODES (HTTP 500); every other check stays as it is.
FAULT_ARGS = ["--debug.crash-executor=2500", "--debug.fail-executor-step=2000", "--debug.fail-swap-copy=50",
              "--debug.fail-draft=200", "--debug.crash-draft=700", "--debug.fail-tokenizer=5000"]
FAULT_CODES = {"step_failed", "tokenizer_error"}
FAULT_KINDS = ("step", "executor_restart", "swap_copy", "draft", "draft_restart")
WORDS = ("once upon a time there was little girl named lily she liked to play with her ball in the "
         "park one day saw big dog and ran home mom said happy sun tree bird cat jumped").split()


class Req:
    """One request as sent, and what came back."""

    def __init__(self, rid, kind, body):
        self.id = rid
        self.kind = kind  # ws, http (JSON) or sse
        self.body = body  # the generate fields (prompt or prompt_ids, sampling, priority, ...)
        self.outputs = {}  # choice index -> {"ids", "text", "finish"} (n > 1: several)
        self.frames = 0
        self.finish_reason = None
        self.usage = None
        self.error = None  # (code, message)
        self._outcome = None  # finished | cancelled | disconnected | refused | error | hang | broken
        self.cancel_sent = False
        self.disconnect = False  # we dropped its connection
        self.problems = []  # protocol violations seen on its stream
        self.start = time.monotonic()
        self.end = None

    @property
    def outcome(self):
        return self._outcome

    def choice(self, index):
        return self.outputs.setdefault(index, {"ids": [], "text": "", "finish": None})

    # The choices' outputs in index order, joined: what a solo rerun must give again.
    @property
    def token_ids(self):
        return join_ids(self.outputs)

    @property
    def text(self):
        return join_texts(self.outputs)

    @outcome.setter
    def outcome(self, value):
        self._outcome = value
        self.end = time.monotonic()

    def describe(self):
        return f"{self.kind} id={self.id} body={json.dumps(self.body)}"


def join_ids(outputs):
    return [t for i in sorted(outputs) for t in outputs[i]["ids"]]


def join_texts(outputs):
    return "\n--\n".join(outputs[i]["text"] for i in sorted(outputs))


def random_body(rng):
    body = {}
    if rng.random() < 0.5:
        n = rng.randint(1, 24)
        body["prompt"] = " ".join(rng.choice(WORDS) for _ in range(n))
    else:
        n = rng.randint(1, 48)
        # Repeated runs make the n-gram drafter find matches.
        ids = [rng.randint(3, 511) for _ in range(n)]
        if rng.random() < 0.4:
            ids = (ids[: max(1, n // 3)] * 4)[:n]
        body["prompt_ids"] = ids
    body["max_tokens"] = rng.randint(1, 200)
    if rng.random() < 0.5:
        body["temperature"] = 0
    else:
        body["temperature"] = round(rng.uniform(0.7, 1.0), 3)
        body["seed"] = rng.randint(0, 2**31 - 1)
    body["priority"] = rng.choice((0, 1))
    body["num_speculative_tokens"] = 0 if rng.random() < 0.35 else rng.randint(1, 4)
    if rng.random() < 0.25:
        body["ignore_eos"] = True
    if rng.random() < 0.15:
        body["n"] = rng.randint(2, 3)  # choices share the prompt's blocks: all of them must come back
    return body


# ---------------------------------------------------------------------------------------------------
# The server


# ---------------------------------------------------------------------------------------------------
# Clients


class Soak:
    def __init__(self, port, mode, rng, duration, clients, faults):
        self.port = port
        self.mode = mode
        self.rng = rng
        self.deadline = time.monotonic() + duration
        self.clients = clients
        self.faults = faults  # fault injection is on: FAULT_CODES errors are explained
        self.requests = []
        self.late_frames = []  # frames for ids that had ended (only unknown_id after a racing cancel is fine)
        self.client_errors = []  # exceptions in our own client code: the test is broken, not the server
        self.next_id = 0

    def new_req(self, kind):
        self.next_id += 1
        req = Req(f"{self.mode[0]}{self.next_id}", kind, random_body(self.rng))
        self.requests.append(req)
        return req

    def running(self):
        return time.monotonic() < self.deadline

    # -- WebSocket: several workers share one connection; a reader task routes frames by id

    async def ws_connection(self, workers):
        url = f"ws://127.0.0.1:{self.port}/v1/stream"
        async with websockets.connect(url, max_size=None, ping_interval=None) as ws:
            routes = {}
            ended = {}  # id -> Req, for frames that come after the end

            async def reader():
                try:
                    async for raw in ws:
                        frame = json.loads(raw)
                        rid = frame.get("id")
                        if rid in routes:
                            routes[rid].put_nowait(frame)
                        else:
                            self.late_frames.append((ended.get(rid), frame))
                except websockets.ConnectionClosed:
                    pass
                for q in routes.values():
                    q.put_nowait(None)  # the connection is gone

            read_task = asyncio.create_task(reader())
            await asyncio.gather(*(self.ws_worker(ws, routes, ended) for _ in range(workers)))
            await ws.close()
            await read_task

    async def ws_worker(self, ws, routes, ended):
        while self.running():
            req = self.new_req("ws")
            q = asyncio.Queue()
            routes[req.id] = q
            cancel_after = self.rng.uniform(0.02, 1.5) if self.rng.random() < 0.15 else None
            start = time.monotonic()
            try:
                await ws.send(json.dumps({"type": "generate", "id": req.id, **req.body}))
            except websockets.ConnectionClosed:
                req.outcome = "broken"
                req.problems.append("connection closed by the server before the generate was sent")
                routes.pop(req.id)
                return
            while req.outcome is None:
                remaining = start + REQUEST_TIMEOUT_S - time.monotonic()
                wait = remaining
                if cancel_after is not None and not req.cancel_sent:
                    wait = min(wait, start + cancel_after - time.monotonic())
                try:
                    frame = await asyncio.wait_for(q.get(), max(wait, 0))
                except asyncio.TimeoutError:
                    if cancel_after is not None and not req.cancel_sent and remaining > 0:
                        req.cancel_sent = True
                        try:
                            await ws.send(json.dumps({"type": "cancel", "id": req.id}))
                        except websockets.ConnectionClosed:
                            pass
                        continue
                    req.outcome = "hang"
                    break
                if frame is None:
                    req.outcome = "broken"
                    req.problems.append("the server closed the connection mid-request")
                    break
                self.ws_frame(req, frame)
            routes.pop(req.id, None)
            ended[req.id] = req

    def ws_frame(self, req, frame):
        kind = frame.get("type")
        req.frames += 1
        if kind == "delta":
            c = req.choice(frame.get("index", 0))
            c["ids"] += frame.get("token_ids", [])
            c["text"] += frame.get("text", "")
            if frame.get("finish_reason"):
                if c["finish"] is not None:
                    req.problems.append(f"choice {frame.get('index', 0)} got two finish_reasons")
                c["finish"] = frame["finish_reason"]
        elif kind == "done":
            req.finish_reason = frame.get("finish_reason")
            req.usage = frame.get("usage")
            if req.finish_reason == "cancelled":
                req.outcome = "cancelled"
                if not req.cancel_sent:
                    req.problems.append("finish_reason cancelled but we sent no cancel")
            else:
                req.outcome = "finished"
        elif kind == "error":
            req.error = (frame.get("code"), frame.get("message"))
            req.outcome = ("refused" if req.error[0] in EXPLAINED_WS_CODES else
                           "faulted" if self.faults and req.error[0] in FAULT_CODES else "error")
        else:
            req.problems.append(f"unexpected frame {frame}")

    # -- WebSocket connections dropped without a close frame, requests in flight

    async def ws_dropper(self):
        while self.running():
            url = f"ws://127.0.0.1:{self.port}/v1/stream"
            async with websockets.connect(url, max_size=None, ping_interval=None) as ws:
                reqs = {}
                for _ in range(self.rng.randint(1, 4)):
                    req = self.new_req("ws")
                    reqs[req.id] = req
                    await ws.send(json.dumps({"type": "generate", "id": req.id, **req.body}))
                drop_at = time.monotonic() + self.rng.uniform(0.05, 1.5)
                try:
                    while time.monotonic() < drop_at and any(r.outcome is None for r in reqs.values()):
                        raw = await asyncio.wait_for(ws.recv(), max(drop_at - time.monotonic(), 0))
                        frame = json.loads(raw)
                        if frame.get("id") in reqs:
                            self.ws_frame(reqs[frame["id"]], frame)
                except asyncio.TimeoutError:
                    pass
                for r in reqs.values():
                    if r.outcome is None:
                        r.outcome = "disconnected"
                        r.disconnect = True
                ws.transport.abort()  # TCP reset, no close frame
            await asyncio.sleep(self.rng.uniform(0, 0.3))

    # -- HTTP /v1/completions, JSON or SSE, one request per connection

    async def http_worker(self, stream):
        while self.running():
            req = self.new_req("sse" if stream else "http")
            drop_after = self.rng.uniform(0.05, 1.0) if stream and self.rng.random() < 0.15 else None
            try:
                await asyncio.wait_for(self.http_one(req, stream, drop_after), REQUEST_TIMEOUT_S)
            except asyncio.TimeoutError:
                req.outcome = "hang"
            except (ConnectionError, asyncio.IncompleteReadError) as e:
                req.outcome = "broken"
                req.problems.append(f"connection failed: {e!r}")

    async def http_one(self, req, stream, drop_after):
        body = {"model": MODEL, **req.body}
        if "prompt_ids" in body:
            body["prompt"] = body.pop("prompt_ids")
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            data = json.dumps(body).encode()
            writer.write((f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                          f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data)
            await writer.drain()
            status, headers = await read_head(reader)
            if status != 200:
                payload = await read_body(reader, headers)
                try:
                    err = json.loads(payload)["error"]
                    req.error = (status, err.get("code"), err.get("message"))
                except (ValueError, KeyError, TypeError):
                    req.error = (status, None, payload[:200])
                req.outcome = ("refused" if status in EXPLAINED_HTTP_STATUS else
                               "faulted" if self.faults and status == 500 and req.error[1] in FAULT_CODES
                               else "error")
                return
            if not stream:
                resp = json.loads(await read_body(reader, headers))
                for choice in resp["choices"]:
                    c = req.choice(choice["index"])
                    c["text"] = choice["text"]
                    c["finish"] = choice["finish_reason"]
                req.finish_reason = resp["choices"][0]["finish_reason"]
                req.usage = resp.get("usage")
                req.outcome = "finished"
                return
            start = time.monotonic()
            done = False
            async for line in body_lines(reader, headers):
                if drop_after is not None and time.monotonic() - start > drop_after and not done:
                    req.outcome = "disconnected"
                    req.disconnect = True
                    writer.transport.abort()
                    return
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                req.frames += 1
                if "error" in chunk:
                    err = chunk["error"]
                    req.error = (200, err.get("code"), err.get("message"))
                    req.outcome = "faulted" if self.faults and req.error[1] in FAULT_CODES else "error"
                    return
                if chunk.get("usage"):
                    req.usage = chunk["usage"]
                for choice in chunk.get("choices", []):
                    c = req.choice(choice.get("index", 0))
                    c["text"] += choice.get("text") or ""
                    if choice.get("finish_reason"):
                        if c["finish"] is not None:
                            req.problems.append(f"choice {choice.get('index', 0)}: two chunks with a finish_reason")
                        c["finish"] = choice["finish_reason"]
            if not done:
                req.problems.append("SSE stream ended without data: [DONE]")
                req.outcome = "broken"
            elif len(req.outputs) != req.body.get("n", 1) or any(c["finish"] is None for c in req.outputs.values()):
                req.problems.append(f"SSE stream without a finish_reason for each of its {req.body.get('n', 1)} choices")
                req.outcome = "broken"
            else:
                req.finish_reason = req.outputs[0]["finish"]
                req.outcome = "finished"
        finally:
            writer.close()

    async def guarded(self, coro):
        try:
            await coro
        except Exception as e:  # a bug in this script, or a connection refused: reported, never hidden
            self.client_errors.append(repr(e))

    async def run(self, on_warm):
        n_ws_conns = max(1, self.clients // 4)  # 3 workers each
        n_http = max(2, self.clients // 4)
        n_drop = max(1, self.clients - 3 * n_ws_conns - n_http)
        tasks = [self.guarded(self.ws_connection(3)) for _ in range(n_ws_conns)]
        tasks += [self.guarded(self.http_worker(stream=i % 2 == 0)) for i in range(n_http)]
        tasks += [self.guarded(self.ws_dropper()) for _ in range(n_drop)]
        tasks.append(on_warm())
        await asyncio.gather(*tasks)
        return f"{n_ws_conns} WebSocket connections x 3 workers, {n_http} HTTP workers, {n_drop} dropping clients"


# ---------------------------------------------------------------------------------------------------
# Checks


def check_stream(req):
    """Shape of one ended request's output; returns problems."""
    problems = list(req.problems)
    if req.outcome in ("finished", "cancelled"):
        if req.finish_reason not in ("length", "stop", "cancelled", "abort"):
            problems.append(f"finish_reason {req.finish_reason!r}")
        if req.kind == "ws" and req.usage is not None and req.usage.get("completion_tokens") != len(req.token_ids):
            problems.append(f"usage.completion_tokens {req.usage.get('completion_tokens')} but "
                            f"{len(req.token_ids)} tokens streamed")
        n = req.body.get("n", 1)
        if req.outcome == "finished" and len(req.outputs) != n:
            problems.append(f"{len(req.outputs)} choices came back of n = {n}")
        all_length = len(req.outputs) == n and all(c["finish"] == "length" for c in req.outputs.values())
        if n == 1 and req.finish_reason == "length":
            all_length = True
        if all_length and req.usage is not None:
            if req.usage.get("completion_tokens") != n * req.body["max_tokens"]:
                problems.append(f"finish_reason length after {req.usage.get('completion_tokens')} tokens, "
                                f"{n} x max_tokens {req.body['max_tokens']}")
        if req.outcome == "finished" and req.usage is None:
            problems.append("no usage")
    return problems


def first_difference(loaded, alone):
    """Where two (token_ids or None, text, finish_reason) outputs part."""
    if loaded[0] is not None and loaded[0] != alone[0]:
        a, b = loaded[0], alone[0]
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return (f"token {i}: under load {a[i:i + 8]} ({len(a)} tokens, {loaded[2]}), "
                f"alone {b[i:i + 8]} ({len(b)} tokens, {alone[2]})")
    if loaded[1] != alone[1]:
        a, b = loaded[1], alone[1]
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return (f"text from char {i}: under load {a[i:i + 40]!r} ({len(a)} chars, {loaded[2]}), "
                f"alone {b[i:i + 40]!r} ({len(b)} chars, {alone[2]})")
    return f"finish_reason under load {loaded[2]}, alone {alone[2]}"


async def solo(port, req, faults=False):
    """The same request again, alone: (token_ids or None, text, finish_reason). With fault injection
    on, a rerun that meets a fault is run again (a few times)."""
    for _ in range(8):
        try:
            return await solo_once(port, req)
        except FaultMet:
            if not faults:
                raise Failure(f"solo rerun of {req.describe()} met a fault with fault injection off")
    raise Failure(f"solo rerun of {req.describe()}: a fault each of 8 times")


class FaultMet(Exception):
    pass


async def solo_once(port, req):
    if req.kind == "ws":
        async with websockets.connect(f"ws://127.0.0.1:{port}/v1/stream", max_size=None) as ws:
            await ws.send(json.dumps({"type": "generate", "id": "solo", **req.body}))
            outputs = {}
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
                if frame["type"] == "delta":
                    c = outputs.setdefault(frame.get("index", 0), {"ids": [], "text": ""})
                    c["ids"] += frame["token_ids"]
                    c["text"] += frame["text"]
                elif frame["type"] == "done":
                    return join_ids(outputs), join_texts(outputs), frame["finish_reason"]
                elif frame.get("code") in FAULT_CODES:
                    raise FaultMet()
                else:
                    raise Failure(f"solo rerun of {req.describe()}: {frame}")
    body = {"model": MODEL, **req.body}
    if "prompt_ids" in body:
        body["prompt"] = body.pop("prompt_ids")
    status, _, payload = await http_request(port, "POST", "/v1/completions", body, timeout=60)
    if status == 500 and any(f'"{c}"'.encode() in payload for c in FAULT_CODES):
        raise FaultMet()
    if status != 200:
        raise Failure(f"solo rerun of {req.describe()}: status {status} {payload[:300]!r}")
    choices = json.loads(payload)["choices"]
    outputs = {c["index"]: {"text": c["text"]} for c in choices}
    return None, join_texts(outputs), choices[0]["finish_reason"]


async def settle(port):
    """Waits until the engine is idle and every device and host block is free; returns the last metrics."""
    end = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        m = await metrics(port)
        idle = all(metric(m, f"troupe:num_requests_{g}") == 0 for g in ("running", "waiting", "swapped"))
        if idle and all(metric(m, u) == 0 for u in KV_USAGE) or time.monotonic() > end:
            return m
        await asyncio.sleep(0.25)


async def soak_mode(serve, mode, args, rng, plant_bug):
    faults = mode == "faults"
    preemption = "swap" if faults else mode
    failures = []
    report = {"mode": mode}
    log_path = os.path.join(args.log_dir, f"soak-{mode}.log")
    server_args = [f"--engine.num-device-blocks={args.blocks}", "--engine.scheduler-policy=priority",
                   f"--engine.preemption-mode={preemption}", "--speculative.method=ngram"]
    if faults:
        server_args += FAULT_ARGS
    server = Server(serve, mode, log_path, server_args)
    try:
        server.wait_listening()
        port = server.port
        soak = Soak(port, mode, rng, args.duration, args.clients, faults)
        rss = {}

        async def on_warm():
            await asyncio.sleep(args.duration * 0.2)
            rss["warm"] = server.rss_bytes()

        t0 = time.monotonic()
        report["clients"] = await soak.run(on_warm)
        report["load_s"] = time.monotonic() - t0
        if server.proc.poll() is not None:
            raise Failure(f"troupe-serve ({mode}) died under load, status {server.proc.returncode}:\n{server.tail()}")
        m = await settle(port)
        rss["end"] = server.rss_bytes()

        reqs = soak.requests
        by = lambda o: [r for r in reqs if r.outcome == o]
        report["tried"] = len(reqs)
        for o in ("finished", "cancelled", "disconnected", "refused", "faulted", "error", "hang", "broken"):
            report[o] = len(by(o))
        report["cancel_sent"] = sum(r.cancel_sent for r in reqs)
        # A cancel that crosses the request's own end on the wire: the server ended it (done, a refusal
        # or an injected fault) before the cancel arrived, and answers the cancel with unknown_id.
        ended_by_server = ("finished", "refused", "faulted")
        report["ended_before_cancel"] = sum(r.cancel_sent and r.outcome in ended_by_server for r in reqs)
        codes = {}
        for r in reqs:
            if r.error:
                key = str(r.error[0]) if r.kind == "ws" else f"{r.error[0]} {r.error[1]}"
                codes[key] = codes.get(key, 0) + 1
        report["errors_by_code"] = codes
        ended = [r.end - r.start for r in reqs if r.outcome == "finished"]
        report["slowest_s"] = max(ended, default=0)
        report["kinds"] = {k: sum(r.kind == k for r in reqs) for k in ("ws", "http", "sse")}

        for e in soak.client_errors:
            failures.append(f"client code failed: {e}")
        if report["tried"] < 50:
            failures.append(f"only {report['tried']} requests were tried: the load is too light to mean anything")
        for r in reqs:
            if r.outcome is None:
                failures.append(f"request never ended (client bug?): {r.describe()}")
            elif r.outcome == "hang":
                failures.append(f"no end within {REQUEST_TIMEOUT_S} s ({len(r.token_ids)} tokens so far): {r.describe()}")
            elif r.outcome == "error":
                failures.append(f"unexplained error {r.error}: {r.describe()}")
            elif r.outcome == "broken":
                failures.append(f"broken stream ({'; '.join(r.problems)}): {r.describe()}")
            else:
                for p in check_stream(r):
                    failures.append(f"{p}: {r.describe()}")
        for owner, frame in soak.late_frames:
            explained = (frame.get("type") == "error" and frame.get("code") == "unknown_id" and owner is not None
                         and owner.cancel_sent and owner.outcome in ended_by_server)
            if not explained:
                failures.append(f"frame for an id that was not in flight: {frame}")

        # Metrics after the load.
        usage = {u: metric(m, u) for u in KV_USAGE}
        gauges = {g: metric(m, f"troupe:num_requests_{g}") for g in ("running", "waiting", "swapped")}
        pre = {md: int(metric(m, "troupe:num_preemptions_total", mode=md)) for md in ("swap", "recompute")}
        report["preemptions"] = pre
        report["swap_fallbacks"] = int(metric(m, "troupe:swap_fallbacks_total"))
        report["spec_drafted_accepted"] = (int(metric(m, "troupe:spec_decode_num_draft_tokens_total")),
                                           int(metric(m, "troupe:spec_decode_num_accepted_tokens_total")))
        report["kv_usage_after"] = usage
        for u, tier in KV_USAGE.items():
            if usage[u] != 0:
                failures.append(f"{u} {usage[u]} after {SETTLE_TIMEOUT_S} s idle ({tier} blocks not freed)")
        for g, v in gauges.items():
            if v != 0:
                failures.append(f"num_requests_{g} {v} after {SETTLE_TIMEOUT_S} s idle")
        if faults:
            report["engine_failures"] = {k: int(metric(m, "troupe:engine_failures_total", kind=k))
                                         for k in FAULT_KINDS}
            for k, n in report["engine_failures"].items():
                if n <= 0:
                    failures.append(f"no {k} failure was injected and recovered from (troupe:engine_failures_total)")
            if report["faulted"] == 0:
                failures.append("no request met a fault: the injection rates are too low to show anything")
        if pre[preemption] <= 0:
            failures.append(f"no {preemption} preemption happened: the pool of {args.blocks} blocks did not force any")

        report["rss"] = (rss.get("warm"), rss["end"])
        if "warm" in rss:
            growth = rss["end"] - rss["warm"]
            bound = max(RSS_BOUND_FRACTION * rss["warm"], RSS_BOUND_BYTES)
            if growth > bound:
                failures.append(f"VmRSS grew by {growth / 2**20:.1f} MiB (from {rss['warm'] / 2**20:.1f} to "
                                f"{rss['end'] / 2**20:.1f} MiB), more than {bound / 2**20:.1f} MiB")
        else:
            failures.append("no warm-up VmRSS sample")

        # Solo reruns: the same request alone must give the same output.
        eligible = [r for r in by("finished") if not r.cancel_sent and r.finish_reason in ("length", "stop")]
        required = eligible
        sample = rng.sample(required, min(len(required), args.check))
        # Requests with several choices (n) are rarer: a few of them are always rerun.
        with_choices = [r for r in required if r.body.get("n", 1) > 1]
        sample += [r for r in with_choices[:5] if r not in sample]
        report["finished_with_choices"] = len(with_choices)
        if not with_choices:
            failures.append("no request with n > 1 finished: the soak did not exercise shared prompt blocks")
        mismatches = 0
        for r in sample:
            ids, text, reason = await solo(port, r, faults)
            expected = (r.token_ids, r.text, r.finish_reason) if r.kind == "ws" else (None, r.text, r.finish_reason)
            if plant_bug and r is sample[0]:
                expected = (expected[0] + [0] if expected[0] is not None else None, expected[1] + "X", expected[2])
            if (ids, text, reason) != expected:
                mismatches += 1
                failures.append(f"solo rerun differs: {first_difference(expected, (ids, text, reason))}: {r.describe()}")
        report["checked"] = len(sample)
        report["check_pool"] = len(required)
        report["mismatches"] = mismatches
        report["checked_seeded_speculating"] = sum(
            1 for r in sample if r.body["temperature"] > 0 and r.body["num_speculative_tokens"] != 0)
        if len(sample) < min(40, len(required)):
            failures.append("fewer outputs checked than asked")
        if len(sample) < 40 and len(required) < 40:
            failures.append(f"only {len(required)} finished requests could be checked (want 40): load too light")
        m2 = await settle(port)
        for u, tier in KV_USAGE.items():
            if metric(m2, u) != 0:
                failures.append(f"{u} {metric(m2, u)} after the solo reruns ({tier} blocks not freed)")
    finally:
        stopped = server.stop()
        if stopped:
            failures.append(stopped)
    report["log"] = log_path
    return report, failures


def print_report(report, failures):
    mib = lambda b: "n/a" if b is None else f"{b / 2**20:.1f} MiB"
    r = report
    print(f"== soak, preemption-mode={r['mode']} ==")
    if "tried" in r:
        print(f"  clients: {r['clients']}; load {r['load_s']:.1f} s")
        print(f"  requests tried {r['tried']} (ws {r['kinds']['ws']}, http {r['kinds']['http']}, sse {r['kinds']['sse']}): "
              f"finished {r['finished']}, cancelled {r['cancelled']} (cancels sent {r['cancel_sent']}, "
              f"{r['ended_before_cancel']} ended first), disconnected {r['disconnected']}, "
              f"refused (overload) {r['refused']}, failed by an injected fault {r['faulted']}, errors {r['error']}, "
              f"hangs {r['hang']}, broken {r['broken']}")
        print(f"  errors by code: {r['errors_by_code'] or 'none'}; slowest finished request {r['slowest_s']:.1f} s")
    if "preemptions" in r:
        print(f"  preemptions: swap {r['preemptions']['swap']}, recompute {r['preemptions']['recompute']} "
              f"(swap fallbacks {r['swap_fallbacks']}); speculative drafted/accepted {r['spec_drafted_accepted']}; "
              f"KV usage after settle {r['kv_usage_after']}")
    if "engine_failures" in r:
        print(f"  injected faults recovered from (troupe:engine_failures_total): {r['engine_failures']}")
    if "rss" in r:
        print(f"  VmRSS after warm-up {mib(r['rss'][0])}, at the end {mib(r['rss'][1])}")
    if "checked" in r:
        print(f"  outputs checked against a solo rerun: {r['checked']} of {r['check_pool']} eligible "
              f"({r['checked_seeded_speculating']} of them seeded and speculating), {r['mismatches']} differ; "
              f"{r['finished_with_choices']} finished with n > 1")
    if failures:
        print(f"  server log: {r.get('log')}")
    for f in failures[:30]:
        print(f"  FAIL: {f}")
    if len(failures) > 30:
        print(f"  ... and {len(failures) - 30} more failures")


def interrupted(signum, frame):
    """SIGTERM (CTest's timeout) unwinds like Ctrl-C, so that the server is stopped on the way out."""
    raise KeyboardInterrupt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("serve", nargs="?", default=os.path.join(ROOT, "build", "bin", "troupe-serve"))
    ap.add_argument("--duration", type=float, default=45.0, help="seconds of load per mode (default 45)")
    ap.add_argument("--clients", type=int, default=24, help="concurrent client coroutines (default 24)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock, printed)")
    ap.add_argument("--modes", default="swap,recompute,faults",
                    help="swap, recompute: preemption modes; faults: swap with [debug] fault injection on")
    ap.add_argument("--check", type=int, default=60, help="finished requests to rerun alone per mode (default 60)")
    ap.add_argument("--blocks", type=int, default=NUM_DEVICE_BLOCKS,
                    help=f"engine.num-device-blocks (default {NUM_DEVICE_BLOCKS}: small enough to force preemption)")
    ap.add_argument("--log-dir", default=None, help="where the server logs go (default: a new temporary folder, "
                    "removed when the test passes)")
    ap.add_argument("--plant-bug", action="store_true", help=argparse.SUPPRESS)  # proves the rerun check fires
    args = ap.parse_args()
    if not os.access(args.serve, os.X_OK):
        print(f"soak.py: no troupe-serve at {args.serve}", file=sys.stderr)
        return 1
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    print(f"soak.py: seed {seed}, {args.duration:.0f} s per mode, {args.clients} clients", flush=True)
    rng = random.Random(seed)
    own_log_dir = args.log_dir is None
    if own_log_dir:
        args.log_dir = tempfile.mkdtemp(prefix="troupe-soak-")
    signal.signal(signal.SIGTERM, interrupted)
    t0 = time.monotonic()
    all_failures = 0
    for mode in args.modes.split(","):
        try:
            report, failures = asyncio.run(soak_mode(args.serve, mode, args, rng, args.plant_bug))
        except Failure as e:
            report, failures = {"mode": mode}, [str(e)]
        print_report(report, failures)
        sys.stdout.flush()
        all_failures += len(failures)
    if own_log_dir and not all_failures:
        shutil.rmtree(args.log_dir, ignore_errors=True)
    print(f"soak.py: {'FAILED' if all_failures else 'passed'} in {time.monotonic() - t0:.0f} s (seed {seed}"
          f"{'' if not all_failures else '; rerun with --seed ' + str(seed) + ' for the same random choices'})")
    return 1 if all_failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("soak.py: interrupted (the server was stopped)", file=sys.stderr)
        sys.exit(130)
