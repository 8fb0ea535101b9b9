"""One text backend in front of several: each request goes to the backend it names.

A run whose judges or LLM selector use another backend than the main one (``backends:`` in the
config, ``prompt.scoring.judge_backend`` and friends) still hands the engine one
:class:`~image_project.backends.base.TextBackend`: a :class:`RoutingTextBackend`. It sends a
:class:`~image_project.backends.base.TextRequest` to ``routes[request.backend]``, or to the
main backend when ``request.backend`` is None. Each routed backend keeps its own transport
(client, pacer, retry policy), shared with nothing else but that backend's image calls. A
request naming a backend that is not routed is a programming error (the config validator
rejects unknown names before any call) and raises ``KeyError`` naming the known ones.
"""

from __future__ import annotations

from collections.abc import Mapping

from image_project.backends.base import TextBackend, TextReply, TextRequest


class RoutingTextBackend:
    """Dispatch on :attr:`TextRequest.backend` (see the module docstring).

    ``label`` and ``default_model`` are the main backend's: the steps that name no backend
    (the prompt pipeline) are the main backend's, and the routed steps always name a model.
    """

    def __init__(self, main: TextBackend, routes: Mapping[str, TextBackend]) -> None:
        self.main = main
        self.routes = dict(routes)

    @property
    def label(self) -> str:
        return self.main.label

    @property
    def default_model(self) -> str:
        return self.main.default_model

    def backend_for(self, name: str | None) -> TextBackend:
        """The backend that serves requests naming ``name`` (None: the main one)."""
        if name is None:
            return self.main
        try:
            return self.routes[name]
        except KeyError:
            known = ", ".join(sorted(self.routes)) or "none"
            raise KeyError(f"no text backend named {name!r} (routed: {known})") from None

    async def complete(self, request: TextRequest) -> TextReply:
        return await self.backend_for(request.backend).complete(request)
