"""A TCP proxy on 127.0.0.1 that a test can cut: :class:`TcpProxy`.

Every connection accepted on ``port`` is relayed to ``target`` (thread per direction).
:meth:`cut` closes every relayed connection and, until :meth:`restore`, closes each new
one at once (counted in :attr:`refused`): to its clients the database has gone away and
refuses them, as a server that is down does."""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Condition()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self.refused = 0
        self.relayed = 0

    def __enter__(self) -> TcpProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._lock:
            self._closed = True
        self._listener.close()
        self._drop_all()

    def cut(self) -> None:
        """Close every relayed connection; refuse new ones until :meth:`restore`."""
        with self._lock:
            self._cut = True
        self._drop_all()

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def wait_refused(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` connections have been refused since the proxy started."""
        with self._lock:
            return self._lock.wait_for(lambda: self.refused >= count, timeout)

    def _drop_all(self) -> None:
        with self._lock:
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._closed:
                    client.close()
                    return
                if self._cut:
                    self.refused += 1
                    self._lock.notify_all()
                    client.close()
                    continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, upstream))
                self.relayed += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
