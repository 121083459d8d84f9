"""What the integration scripts (soak, overload) share: troupe-serve as a child process, and
HTTP/1.1 over plain asyncio streams, one request per connection (so that every request meets the
server's connection limits as a real client's would)."""
import asyncio
import ctypes
import json
import os
import re
import signal
import subprocess
import threading

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MODEL = "stories260k"


class Server:
    """troupe-serve on an ephemeral port of 127.0.0.1, its output kept in log_path and in memory."""

    def __init__(self, serve, label, log_path, args):
        self.label = label
        self.log_path = log_path
        self.lines = []
        self.port = None
        self.cmd = [serve, "--config-file=configs/stories260k-cpu.ini", "--server.port=0", *args]
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace", preexec_fn=die_with_parent)
        self._port_seen = threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        with open(self.log_path, "w", encoding="utf-8") as log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                self.lines.append(line)
                m = re.match(r"^listening on [0-9.]+:(\d+)", line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    self._port_seen.set()
        self._port_seen.set()

    def wait_listening(self, timeout=60):
        self._port_seen.wait(timeout)
        if self.port is None:
            raise Failure(f"troupe-serve ({self.label}) printed no 'listening on' line "
                          f"(exit {self.proc.poll()}):\n{self.tail()}")

    def tail(self, n=40):
        return "".join(self.lines[-n:])

    def rss_bytes(self):
        with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise Failure("no VmRSS in /proc/PID/status")

    def stop(self, timeout=20):
        """SIGTERM; returns None when it stopped with status 0, else what went wrong."""
        if self.proc.poll() is not None:
            return f"troupe-serve had already exited with status {self.proc.returncode}"
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return f"troupe-serve did not stop within {timeout} s of SIGTERM (killed)"
        return None if rc == 0 else f"troupe-serve exited with status {rc} after SIGTERM"


class Failure(Exception):
    pass


def die_with_parent():
    """In the child: SIGKILL when this script dies (a CTest timeout must not leave a server behind)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


# ---------------------------------------------------------------------------------------------------
# HTTP over plain asyncio streams (one request per connection)


async def http_request(port, method, path, body=None, timeout=30.0):
    """Returns (status, headers, body bytes)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    try:
        data = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
        writer.write(head.encode() + data)
        await writer.drain()
        status, headers = await asyncio.wait_for(read_head(reader), timeout)
        payload = await asyncio.wait_for(read_body(reader, headers), timeout)
        return status, headers, payload
    finally:
        writer.close()


async def read_head(reader):
    status_line = await reader.readline()
    m = re.match(rb"HTTP/1\.[01] (\d{3})", status_line)
    if not m:
        raise ConnectionError(f"bad status line {status_line!r}")
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(m.group(1)), headers


async def read_body(reader, headers):
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                await reader.readline()
                return out
            out += await reader.readexactly(size)
            await reader.readline()
    return await reader.read()


async def body_lines(reader, headers):
    """The body of a streamed response, line by line (close-delimited or chunked)."""
    if headers.get("transfer-encoding", "").lower() != "chunked":
        while True:
            line = await reader.readline()
            if not line:
                return
            yield line
    buf = b""
    while True:
        size = int((await reader.readline()).split(b";")[0], 16)
        if size == 0:
            if buf:
                yield buf
            return
        buf += await reader.readexactly(size)
        await reader.readline()
        while b"\n" in buf:
            line, _, buf = buf.partition(b"\n")
            yield line + b"\n"


async def metrics(port):
    status, _, payload = await http_request(port, "GET", "/metrics")
    if status != 200:
        raise Failure(f"GET /metrics: status {status}")
    values = {}
    for line in payload.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def metric(values, name, **labels):
    want = {"model_name": MODEL, **labels}
    for key, value in values.items():
        base, _, rest = key.partition("{")
        if base != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if all(got.get(k) == v for k, v in want.items()):
            return value
    raise Failure(f"/metrics has no {name}{labels}")


