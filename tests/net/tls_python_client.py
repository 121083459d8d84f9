#!/usr/bin/env python3
"""troupe's TLS port driven by third-party clients: Python's ssl module with
urllib (HTTPS) and the `websockets` package (WSS; Debian 12: python3-websockets
10.4), each verifying the server against the test certificate as its only CA.

Usage: tls_python_client.py PORT CA_FILE   (tls_test.cpp starts the server)

Checks, on the bundled stories260k model:
  a) GET /health and POST /v1/completions over HTTPS answer 200, the completion
     with 8 tokens;
  b) a WSS generate on /v1/stream streams deltas and ends with a done frame whose
     text equals the HTTPS completion's for the same greedy request;
  c) a client that does not trust the certificate is refused at the handshake.
Exits 1 with a message naming what differed.
"""
import asyncio
import json
import ssl
import sys
import urllib.error
import urllib.request

import websockets

TIMEOUT_S = 60
REQUEST = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "ignore_eos": True}


class Mismatch(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Mismatch(what)


def https(ctx, port, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=ctx) as resp:
        return resp.status, resp.read().decode()


async def wss_generate(ctx, port):
    async with websockets.connect(f"wss://127.0.0.1:{port}/v1/stream", ssl=ctx, open_timeout=TIMEOUT_S) as ws:
        await ws.send(json.dumps({"type": "generate", "id": "py", **REQUEST}))
        text, deltas = "", 0
        while True:
            raw = await asyncio.wait_for(ws.recv(), TIMEOUT_S)
            frame = json.loads(raw)
            check(frame.get("id") == "py", f"WSS: frame for another id: {raw}")
            if frame["type"] == "delta":
                text += frame["text"]
                deltas += 1
            elif frame["type"] == "done":
                return text, deltas, frame
            else:
                raise Mismatch(f"WSS: unexpected frame {raw}")


def main(port, ca_file):
    ctx = ssl.create_default_context(cafile=ca_file)  # verifies the chain and that the name is 127.0.0.1

    status, body = https(ctx, port, "/health")
    check(status == 200, f"a) GET /health: status {status}")
    status, body = https(ctx, port, "/v1/completions", REQUEST)
    check(status == 200, f"a) POST /v1/completions: status {status}: {body}")
    completion = json.loads(body)
    http_text = completion["choices"][0]["text"]
    check(completion["usage"]["completion_tokens"] == 8, f"a) completion: {body}")
    print(f"ok  a) HTTPS: /health and /v1/completions -> {http_text!r}")

    text, deltas, done = asyncio.run(wss_generate(ctx, port))
    check(done.get("finish_reason") == "length", f"b) WSS done frame: {json.dumps(done)}")
    check(text == http_text, f"b) WSS streamed {text!r}, HTTPS returned {http_text!r}")
    print(f"ok  b) WSS: {deltas} deltas, the same text")

    untrusting = ssl.create_default_context()  # the system's CAs only
    try:
        https(untrusting, port, "/health")
        raise Mismatch("c) a client without the test CA was served")
    except urllib.error.URLError as e:
        check(isinstance(e.reason, ssl.SSLCertVerificationError), f"c) expected a verification error, got {e!r}")
    print("ok  c) a client that does not trust the certificate is refused")
    print(f"tls_python_client: all checks passed ({ssl.OPENSSL_VERSION}, websockets {websockets.__version__})")


if __name__ == "__main__":
    if len(sys.argv) != 3 or not sys.argv[1].isdigit():
        sys.exit("usage: tls_python_client.py PORT CA_FILE")
    try:
        main(int(sys.argv[1]), sys.argv[2])
    except Mismatch as e:
        print(f"tls_python_client: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
    except (OSError, websockets.WebSocketException) as e:
        print(f"tls_python_client: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
