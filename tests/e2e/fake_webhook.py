"""A scripted webhook receiver on 127.0.0.1: answers each POST with the next status of its
script (then 200), or hangs without answering; records what it acknowledged.

It can be stopped and started again on the same port, as a real receiver restarts.
"""

from __future__ import annotations

from http.server import ThreadingHTTPServer

from tests.e2e.scripted_server import RecordedRequest, Reply, ScriptedServer

HANG = "hang"


class FakeWebhook(ScriptedServer):
    def __init__(self, script: list[int | str] = ()):
        super().__init__()
        self.script = list(script)
        self.acknowledged: list[dict] = []  # bodies answered with 200
        self.port = 0

    def start(self) -> FakeWebhook:
        super().start()
        self.port = self._server.server_address[1]
        return self

    def restart(self) -> FakeWebhook:
        """Stop, then listen again on the same port (the sender's URL stays valid)."""
        self.stop()
        self._release.clear()
        port = self.port
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        import threading

        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def respond(self, request: RecordedRequest, reply: Reply) -> None:
        step = self.script.pop(0) if self.script else 200
        if step == HANG:
            reply.hang()
            return
        if step == 200:
            self.acknowledged.append(request.body)
        reply.json(int(step), {"ok": step == 200})
