"""The proxy to the sidecar's HTTP socket, for the owned routes (a ``proxy`` decision).

Guarantees:
- the request reaches the sidecar with the client's own headers (no hop-by-hop ones, none the
  client library would add, no client-sent ``x-authsvc-*``), the raw path and query, the body
  streamed, and ``x-authsvc-peer`` / ``x-authsvc-scheme`` set by the gate;
- the answer streams back with its status and headers (hop-by-hop ones dropped), undecoded;
- a failure before the answer's headers went out is ``Unavailable`` (a 503); after, the client
  sees a cut connection, never a wrong answer.
"""
from __future__ import annotations

from aiohttp import ClientError, ClientSession, DummyCookieJar, UnixConnector, web
from multidict import CIMultiDict
from yarl import URL

from .connection import Unavailable
from .decision_client import DecisionClient

HOP_BY_HOP = frozenset(
    ("connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
     "transfer-encoding", "upgrade")
)
_NO_AUTO_HEADERS = frozenset(("Content-Type", "User-Agent", "Accept", "Accept-Encoding"))
_CHUNK = 64 * 1024


class SidecarProxy:
    def __init__(self, client: DecisionClient) -> None:
        self.client = client  # names the sidecar's HTTP socket (its hello)
        self._session: ClientSession | None = None

    async def forward(self, request: web.Request) -> web.StreamResponse:
        """The sidecar's answer to ``request``, streamed both ways; ``Unavailable`` when the sidecar's
        HTTP socket fails before the answer's headers went out."""
        session = self._session
        if session is None or session.closed:
            socket_path = self.client.sidecar_info.get("http_socket")
            if not socket_path:
                raise Unavailable("sidecar did not name its HTTP socket")
            session = self._session = ClientSession(
                connector=UnixConnector(path=socket_path), auto_decompress=False, cookie_jar=DummyCookieJar(),
            )
        headers = CIMultiDict()
        for name, value in request.headers.items():
            lower = name.lower()
            if lower not in HOP_BY_HOP and not lower.startswith("x-authsvc-"):
                headers.add(name, value)
        headers["x-authsvc-peer"] = request.remote or ""
        headers["x-authsvc-scheme"] = request.scheme
        url = URL("http://authsvc.sidecar" + request.raw_path, encoded=True)
        data = request.content if request.body_exists else None
        response: web.StreamResponse | None = None
        try:
            # skip_auto_headers: the sidecar sees the client's headers, not ones the client library would add
            async with session.request(
                request.method, url, headers=headers, data=data, allow_redirects=False, skip_auto_headers=_NO_AUTO_HEADERS,
            ) as upstream:
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for name, value in upstream.headers.items():
                    if name.lower() not in HOP_BY_HOP:
                        response.headers.add(name, value)
                await response.prepare(request)
                async for chunk in upstream.content.iter_chunked(_CHUNK):
                    await response.write(chunk)
                await response.write_eof()
                return response
        except (OSError, ClientError) as exc:
            if response is None or not response.prepared:
                raise Unavailable(f"sidecar HTTP socket: {exc}") from None
            raise  # headers already sent: the client sees a cut connection, never a wrong answer

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
