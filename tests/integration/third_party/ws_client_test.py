#!/usr/bin/env python3
"""troupe-serve's WebSocket /v1/stream driven by a third-party client: the
Python `websockets` package (Debian 12: python3-websockets 10.4, asyncio API).

Usage: ws_client_test.py PORT   (run_test.sh starts and stops the server)

Checks, all on the bundled stories260k model:
  a) two greedy requests in flight on one connection (ids "a" and 7) stream
     the golden text and what POST /v1/completions returns for the same request;
  b) a cancel after the first delta ends the request with finish_reason "cancelled";
  c) a binary frame is answered with an error frame and the connection goes on;
  d) 1000 pipelined requests on one connection all finish.
Exits 1 with a message naming what differed.
"""
import asyncio
import json
import os
import sys
import urllib.request

import websockets

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MODEL = "stories260k"
STEP_TIMEOUT_S = 120


class Mismatch(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Mismatch(what)


def golden_case():
    with open(os.path.join(ROOT, "models", MODEL, "golden_greedy.json"), encoding="utf-8") as f:
        return json.load(f)["cases"][0]


def http_completion(port, prompt, max_tokens):
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=STEP_TIMEOUT_S) as resp:
        check(resp.status == 200, f"POST /v1/completions: status {resp.status}")
        return json.load(resp)


def generate(req_id, prompt, max_tokens):
    return json.dumps({"type": "generate", "id": req_id, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True})


async def recv_frame(ws):
    raw = await ws.recv()
    check(isinstance(raw, str), f"server sent a binary frame: {raw!r}")
    try:
        frame = json.loads(raw)
    except json.JSONDecodeError as e:
        raise Mismatch(f"server frame is not JSON ({e}): {raw!r}")
    check(isinstance(frame, dict) and "type" in frame, f"server frame without a type: {raw}")
    return frame, raw


class Stream:
    """One request's frames: deltas until its done frame."""

    def __init__(self, req_id):
        self.id = req_id
        self.text = ""
        self.token_ids = []
        self.done = None

    def add(self, frame, raw):
        check(self.done is None, f"frame for id {self.id!r} after its done frame: {raw}")
        if frame["type"] == "delta":
            check(isinstance(frame.get("text"), str) and isinstance(frame.get("token_ids"), list),
                  f"delta without text/token_ids: {raw}")
            self.text += frame["text"]
            self.token_ids += frame["token_ids"]
        elif frame["type"] == "done":
            self.done = frame
        else:
            raise Mismatch(f"unexpected frame for id {self.id!r}: {raw}")


def same_id(a, b):
    # The id is echoed exactly as sent: 7 must come back as the number 7, not "7" (nor 7.0 / true).
    return type(a) is type(b) and a == b


async def read_streams(ws, streams, what):
    """Reads frames into streams (a list of Stream) until every one has its done frame."""
    order = []

    async def loop():
        while any(s.done is None for s in streams):
            frame, raw = await recv_frame(ws)
            check(frame["type"] != "error", f"{what}: error frame {raw}")
            matches = [s for s in streams if same_id(s.id, frame.get("id"))]
            check(len(matches) == 1, f"{what}: frame for an id not in flight: {raw}")
            matches[0].add(frame, raw)
            order.append(matches[0].id)

    try:
        await asyncio.wait_for(loop(), STEP_TIMEOUT_S)
    except asyncio.TimeoutError:
        missing = [s.id for s in streams if s.done is None][:10]
        raise Mismatch(f"{what}: no done frame within {STEP_TIMEOUT_S} s for ids {missing}")
    return order


def check_done(stream, finish_reason, completion_tokens, what):
    d = stream.done
    raw = json.dumps(d)
    check(d.get("finish_reason") == finish_reason,
          f"{what}: finish_reason {d.get('finish_reason')!r}, expected {finish_reason!r}: {raw}")
    usage = d.get("usage")
    check(isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int),
          f"{what}: done frame without usage.completion_tokens: {raw}")
    if completion_tokens is not None:
        check(usage["completion_tokens"] == completion_tokens,
              f"{what}: usage.completion_tokens {usage['completion_tokens']}, expected {completion_tokens}: {raw}")
    check(usage["completion_tokens"] == len(stream.token_ids),
          f"{what}: usage.completion_tokens {usage['completion_tokens']} but the deltas carried "
          f"{len(stream.token_ids)} token ids: {raw}")
    check(isinstance(d.get("timings"), dict), f"{what}: done frame without timings: {raw}")


async def interleaved(ws, port, golden):
    what = "a) interleaved greedy requests"
    dog = http_completion(port, "The little dog", 10)
    dog_text = dog["choices"][0]["text"]
    a, seven = Stream("a"), Stream(7)
    await ws.send(generate("a", golden["prompt"], 64))
    await ws.send(generate(7, "The little dog", 10))
    order = await read_streams(ws, [a, seven], what)
    check(a.text == golden["generated_text"],
          f"{what}: id 'a' streamed {a.text!r}, golden text is {golden['generated_text']!r}")
    check(a.token_ids == golden["generated_ids"],
          f"{what}: id 'a' streamed token ids {a.token_ids}, golden ids are {golden['generated_ids']}")
    check(seven.text == dog_text,
          f"{what}: id 7 streamed {seven.text!r}, POST /v1/completions returned {dog_text!r}")
    check_done(a, "length", 64, what + " (id 'a')")
    check_done(seven, "length", 10, what + " (id 7)")
    both_before_done = order.index(7) < len(order) - 1 - order[::-1].index("a")
    print(f"ok  {what}: {len(order)} frames, id 7 {'interleaved with' if both_before_done else 'after'} id 'a'")


async def cancel_after_first_delta(ws):
    what = "b) cancel after the first delta"
    s = Stream("long")
    await ws.send(generate("long", "Once upon a time", 500))

    async def loop():
        cancelled = False
        while s.done is None:
            frame, raw = await recv_frame(ws)
            check(same_id(frame.get("id"), "long"), f"{what}: frame for another id: {raw}")
            if frame["type"] == "error":
                raise Mismatch(f"{what}: error frame {raw}"
                               + (" (the request had finished before the cancel arrived?)" if cancelled else ""))
            s.add(frame, raw)
            if frame["type"] == "delta" and not cancelled:
                await ws.send(json.dumps({"type": "cancel", "id": "long"}))
                cancelled = True

    try:
        await asyncio.wait_for(loop(), STEP_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise Mismatch(f"{what}: no done frame within {STEP_TIMEOUT_S} s")
    check_done(s, "cancelled", None, what)
    n = s.done["usage"]["completion_tokens"]
    check(n < 500, f"{what}: all 500 tokens were generated despite the cancel: {json.dumps(s.done)}")
    print(f"ok  {what}: done after {n} of 500 tokens")


async def binary_frame(ws):
    what = "c) binary frame"
    await ws.send(b"\x00\x01binary\xff")
    try:
        frame, raw = await asyncio.wait_for(recv_frame(ws), STEP_TIMEOUT_S)
    except websockets.ConnectionClosed as e:
        raise Mismatch(f"{what}: the server closed the connection ({e}) instead of answering with an error frame")
    except asyncio.TimeoutError:
        raise Mismatch(f"{what}: no answer within {STEP_TIMEOUT_S} s")
    check(frame["type"] == "error", f"{what}: expected an error frame, got {raw}")
    check(isinstance(frame.get("code"), str) and isinstance(frame.get("message"), str) and "id" in frame,
          f"{what}: error frame without id/code/message: {raw}")
    s = Stream("after-binary")
    await ws.send(generate("after-binary", "The little dog", 4))
    await read_streams(ws, [s], what + ", then a request")
    check_done(s, "length", 4, what + ", then a request")
    print(f"ok  {what}: {raw}; the connection still serves requests")


async def pipelined(ws, golden):
    n = 1000
    what = f"d) {n} pipelined requests"
    streams = [Stream(f"p{i}") for i in range(n)]
    for s in streams:
        await ws.send(generate(s.id, golden["prompt"], 2))
    by_id = {s.id: s for s in streams}

    async def loop():
        finished = 0
        while finished < n:
            frame, raw = await recv_frame(ws)
            check(frame["type"] != "error", f"{what}: error frame {raw}")
            s = by_id.get(frame.get("id")) if isinstance(frame.get("id"), str) else None
            check(s is not None, f"{what}: frame for an id not in flight: {raw}")
            s.add(frame, raw)
            finished += frame["type"] == "done"

    try:
        await asyncio.wait_for(loop(), STEP_TIMEOUT_S)
    except asyncio.TimeoutError:
        missing = [s.id for s in streams if s.done is None]
        raise Mismatch(f"{what}: {len(missing)} without a done frame after {STEP_TIMEOUT_S} s, e.g. {missing[:10]}")
    for s in streams:
        check_done(s, "length", 2, f"{what} (id {s.id})")
    texts = {s.text for s in streams}
    check(len(texts) == 1, f"{what}: the same greedy request gave {len(texts)} different texts: {sorted(texts)[:5]}")
    text = texts.pop()
    check(golden["generated_text"].startswith(text) and text,
          f"{what}: text {text!r} is not the start of the golden text")
    print(f"ok  {what}: all done, each {text!r}")


async def main(port):
    golden = golden_case()
    uri = f"ws://127.0.0.1:{port}/v1/stream"
    async with websockets.connect(uri, open_timeout=30, close_timeout=10) as ws:
        await interleaved(ws, port, golden)
        await cancel_after_first_delta(ws)
        await binary_frame(ws)
        await pipelined(ws, golden)
    print(f"ws_client_test: all checks passed (websockets {websockets.__version__})")


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.exit("usage: ws_client_test.py PORT")
    try:
        asyncio.run(main(int(sys.argv[1])))
    except Mismatch as e:
        print(f"ws_client_test: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
    except (OSError, websockets.WebSocketException) as e:
        print(f"ws_client_test: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
