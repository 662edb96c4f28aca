"""A forwarder to the broker's management API that stops an ``up`` midway, the same way on every run.

It forwards until the broker has answered the first declaration (a ``201 Created`` or ``204 No Content``: the
management API answers a PUT with one of them; the stack's vhost is new, so nothing is deleted), then holds every
connection: the ``up`` has created something and cannot finish, whatever the machine's speed. ``reopen`` drops what
the held connections still had to send (their client is killed by then) and forwards new connections again.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from nsb_delays.infra.commands.demo.servers import HOST

ANSWERED_A_DECLARATION = (b"HTTP/1.1 201", b"HTTP/1.1 204")


class HeldAfterFirstDeclaration:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server((HOST, 0))
        self.url = f"http://{HOST}:{self.listener.getsockname()[1]}"
        self.declared = threading.Event()
        self.open = threading.Event()
        self.open.set()
        self.generation = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def reopen(self) -> None:
        self.generation += 1
        self.open.set()

    def close(self) -> None:
        self.listener.close()
        self.reopen()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection((HOST, self.target_port))
            except OSError:
                client.close()
                continue
            generation = self.generation
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._copy, args=(source, sink, generation), daemon=True).start()

    def _copy(self, source: socket.socket, sink: socket.socket, generation: int) -> None:
        try:
            while data := source.recv(65536):
                if not self.declared.is_set() and data.startswith(ANSWERED_A_DECLARATION):  # once: not after reopen
                    self.open.clear()
                    self.declared.set()
                self.open.wait()
                if generation != self.generation:  # held while its client was killed: dropped
                    for end in (source, sink):
                        with contextlib.suppress(OSError):
                            end.shutdown(socket.SHUT_RDWR)
                    return
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
