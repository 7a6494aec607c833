"""Fetching an image by its `http(s)` URL, only as far as the server allows: a host on its
allowlist, never a private, loopback, link-local or reserved address (unless a network is opened
explicitly), within a byte limit and a time limit.

Every hop is checked: the host's resolved addresses before connecting (the connection then goes
to the address checked, so a second lookup cannot answer otherwise), and each redirect's target
the same way; redirects are followed here, a few at most, never by httpx.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urljoin

import httpx

from llmflow.errors import InvalidImage

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_REDIRECTS = 3
_REDIRECTS = (301, 302, 303, 307, 308)
_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class UrlPolicy:
    """Which image URLs a server fetches. No hosts (the default): none."""

    #: host names (or IP literals) that image URLs may name, lower case
    hosts: frozenset[str] = frozenset()
    #: private or reserved networks that are opened explicitly (e.g. 127.0.0.0/8 for an image
    #: server beside this one); every other non-global address is refused
    networks: tuple[IPNetwork, ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_redirects: int = DEFAULT_MAX_REDIRECTS

    @classmethod
    def of(cls, hosts: Sequence[str], networks: Sequence[str] = (), **limits: float) -> UrlPolicy:
        return cls(
            frozenset(h.strip().lower().strip("[]") for h in hosts if h.strip()),
            tuple(ipaddress.ip_network(n.strip(), strict=False) for n in networks if n.strip()),
            **limits,  # type: ignore[arg-type]
        )

    def refusal(self, address: IPAddress) -> str | None:
        """Why `address` may not be fetched from, or None when it may."""
        if address.version == 6 and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in network for network in self.networks):
            return None
        for kind in ("unspecified", "loopback", "link_local", "multicast", "reserved", "private"):
            if getattr(address, f"is_{kind}"):
                return f"{kind.replace('_', '-')} address"
        return None if address.is_global else "non-global address"


async def fetch_image(url: str, where: str, policy: UrlPolicy, max_bytes: int) -> bytes:
    """The body of `url` (at most `max_bytes`; not checked as an image here); every refusal is an
    `InvalidImage` naming `where`."""
    if not policy.hosts:
        raise InvalidImage(where, "this server fetches no image URLs: send the image as a data URI")
    try:
        return await asyncio.wait_for(_follow(url, where, policy, max_bytes), policy.timeout_s)
    except asyncio.TimeoutError:
        raise InvalidImage(where, f"the image URL did not answer within {policy.timeout_s:g} s") from None
    except httpx.HTTPError as exc:
        raise InvalidImage(where, f"the image URL could not be fetched: {type(exc).__name__}") from None


async def _follow(url: str, where: str, policy: UrlPolicy, max_bytes: int) -> bytes:
    timeout = httpx.Timeout(policy.timeout_s)
    async with httpx.AsyncClient(follow_redirects=False, trust_env=False, timeout=timeout) as client:
        for _ in range(policy.max_redirects + 1):
            target = await _checked(url, where, policy)
            async with client.stream(
                "GET",
                target.pinned,
                headers={"Host": target.host_header, "Accept-Encoding": "identity"},
                extensions=target.extensions,
            ) as response:
                if response.status_code in _REDIRECTS and "location" in response.headers:
                    url = urljoin(url, response.headers["location"])
                    continue
                if response.status_code != 200:
                    raise InvalidImage(where, f"the image URL answered HTTP {response.status_code}")
                return await _body(response, where, max_bytes)
    raise InvalidImage(where, f"the image URL redirected more than {policy.max_redirects} times")


@dataclass(frozen=True, slots=True)
class _Target:
    """One hop: the URL with its host replaced by the address checked, and what keeps the
    request addressed to the host (its Host header, TLS's server name)."""

    pinned: httpx.URL
    host_header: str
    extensions: dict[str, str]


async def _checked(url: str, where: str, policy: UrlPolicy) -> _Target:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        raise InvalidImage(where, "is not a valid URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidImage(where, "an image URL must be http(s)://HOST/...")
    host = parsed.host.lower()
    if host not in policy.hosts:
        raise InvalidImage(where, f"this server fetches no images from {host!r} (not on its allowlist)")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    address = await _address(host, port, where, policy)
    default_port = parsed.port is None
    netloc = f"[{host}]" if ":" in host else host
    extensions = {"sni_hostname": host} if parsed.scheme == "https" else {}
    return _Target(
        parsed.copy_with(host=str(address)),
        netloc if default_port else f"{netloc}:{port}",
        extensions,
    )


async def _address(host: str, port: int, where: str, policy: UrlPolicy) -> IPAddress:
    """The address to connect to: every address `host` resolves to must be allowed (a name
    that also resolves to a private address is refused, whichever one a client would pick)."""
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror:
            raise InvalidImage(where, f"the image URL's host {host!r} does not resolve") from None
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    for address in addresses:
        reason = policy.refusal(address)
        if reason is not None:
            raise InvalidImage(where, f"the image URL's host {host!r} is {address}, a {reason}: refused")
    return addresses[0]


async def _body(response: httpx.Response, where: str, max_bytes: int) -> bytes:
    declared = response.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise InvalidImage(
            where, f"the image at the URL is larger than {max_bytes} bytes, this server's limit"
        )
    data = bytearray()
    async for chunk in response.aiter_raw(_CHUNK):  # as sent: nothing decompressed here
        data += chunk
        if len(data) > max_bytes:
            raise InvalidImage(
                where, f"the image at the URL is larger than {max_bytes} bytes, this server's limit"
            )
    return bytes(data)
