"""Fetching image URLs: the allowlist, the address of every hop, the byte and time limits,
against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from llmflow.errors import InvalidImage
from llmflow.media.urls import UrlPolicy, fetch_image
from tests.media.images import image_bytes, image_server

LOCAL = ("127.0.0.1",)
MAX = 1024 * 1024


@pytest.fixture(scope="module")
def base():
    with image_server() as url:
        yield url


def fetch(url: str, policy: UrlPolicy, max_bytes: int = MAX) -> bytes:
    return asyncio.run(fetch_image(url, "f", policy, max_bytes))


def refused(url: str, policy: UrlPolicy, max_bytes: int = MAX) -> str:
    with pytest.raises(InvalidImage) as info:
        fetch(url, policy, max_bytes)
    assert info.value.problems[0].field == "f"
    return info.value.problems[0].message


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "non-global"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
    ],
)
def test_non_global_addresses_are_refused(address, kind):
    assert kind in UrlPolicy().refusal(ipaddress.ip_address(address))


def test_global_addresses_and_opened_networks_are_allowed():
    assert UrlPolicy().refusal(ipaddress.ip_address("93.184.216.34")) is None
    opened = UrlPolicy.of(["x"], ["127.0.0.0/8"])
    assert opened.refusal(ipaddress.ip_address("127.0.0.1")) is None
    assert opened.refusal(ipaddress.ip_address("10.0.0.1")) is not None


def test_no_hosts_no_fetching(base):
    assert "fetches no image URLs" in refused(f"{base}/image.png", UrlPolicy())


def test_a_host_off_the_allowlist_is_refused(base):
    assert "not on its allowlist" in refused("http://example.com/a.png", UrlPolicy.of(["example.org"]))


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "169.254.169.254", "10.0.0.7"])
def test_a_private_address_is_refused_before_connecting(host):
    message = refused(f"http://{host}:9/a.png", UrlPolicy.of([host], timeout_s=30))
    assert "refused" in message and "address" in message


def test_an_allowed_image_is_fetched(base):
    assert fetch(f"{base}/image.png", UrlPolicy.of(LOCAL, ["127.0.0.0/8"])) == image_bytes()


def test_the_loopback_check_refuses_the_local_server(base):
    assert "loopback address" in refused(f"{base}/image.png", UrlPolicy.of(LOCAL))


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("http://10.0.0.7/a.png", "private address"),
        ("http://169.254.169.254/latest/meta-data/", "link-local address"),
        ("http://example.com/a.png", "not on its allowlist"),
        ("file:///etc/passwd", "must be http(s)"),
    ],
)
def test_every_redirect_target_is_checked(base, target, says):
    policy = UrlPolicy.of([*LOCAL, "10.0.0.7", "169.254.169.254"], ["127.0.0.0/8"])
    assert says in refused(f"{base}/redirect?to={target}", policy)


def test_a_redirect_to_an_allowed_place_is_followed(base):
    policy = UrlPolicy.of(LOCAL, ["127.0.0.0/8"])
    assert fetch(f"{base}/redirect?to=/image.png", policy) == image_bytes()


def test_redirects_end(base):
    policy = UrlPolicy.of(LOCAL, ["127.0.0.0/8"], max_redirects=2)
    assert "more than 2 times" in refused(f"{base}/loop", policy)


def test_a_slow_server_meets_the_time_limit(base):
    policy = UrlPolicy.of(LOCAL, ["127.0.0.0/8"], timeout_s=0.5)
    assert "within 0.5 s" in refused(f"{base}/slow", policy)


def test_too_many_bytes_end_the_download(base):
    policy = UrlPolicy.of(LOCAL, ["127.0.0.0/8"])
    assert "larger than 100000 bytes" in refused(f"{base}/big", policy, max_bytes=100_000)
    assert "larger than 10 bytes" in refused(f"{base}/image.png", policy, max_bytes=10)


def test_an_error_answer_is_refused(base):
    assert "HTTP 404" in refused(f"{base}/missing", UrlPolicy.of(LOCAL, ["127.0.0.0/8"]))
