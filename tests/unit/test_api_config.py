"""`[api]`: loopback by default; another address only with TLS or plain HTTP on purpose."""

from pathlib import Path

import pytest

from taskherd.config import check_reloadable, parse_config
from taskherd.model.settings import ConfigError


def parse(raw):
    return parse_config(raw, base_dir=Path("/srv/fleet"))


def test_the_api_is_off_unless_listen_is_set():
    assert parse({}).api.listen is None
    api = parse({"api": {"listen": "127.0.0.1:8765"}}).api
    assert (api.host, api.port, api.max_body_bytes) == ("127.0.0.1", 8765, 4 << 20)
    assert parse({"api": {"listen": "[::1]:9000"}}).api.host == "::1"
    assert parse({"api": {"listen": "localhost:9000"}}).api.host == "localhost"


@pytest.mark.parametrize("listen", ["0.0.0.0:8765", "192.168.1.5:80", "[::]:8765",
                                    "fleet.example:8765"])
def test_an_address_other_machines_reach_is_refused_without_tls(listen):
    with pytest.raises(ConfigError, match="tls_cert and api.tls_key, or write "
                                          "api.allow_plain_http = true"):
        parse({"api": {"listen": listen}})
    assert parse({"api": {"listen": listen, "allow_plain_http": True}}).api.listen == listen
    tls = parse({"api": {"listen": listen, "tls_cert": "c.pem", "tls_key": "k.pem"}}).api
    assert tls.tls_cert == "/srv/fleet/c.pem"


@pytest.mark.parametrize(("raw", "message"), [
    ({"listen": "8765"}, "api.listen = '8765': expected 'HOST:PORT'"),
    ({"listen": "127.0.0.1:99999"}, "expected 'HOST:PORT'"),
    ({"listen": 8765}, "api.listen = 8765"),
    ({"listen": "127.0.0.1:1", "tls_cert": "c.pem"}, "go together"),
    ({"listen": "127.0.0.1:1", "allow_plain_http": "yes"}, "api.allow_plain_http = 'yes'"),
    ({"listen": "127.0.0.1:1", "max_body_bytes": 0}, "api.max_body_bytes = 0"),
    ({"lisen": "127.0.0.1:1"}, "did you mean 'listen'"),
    ({"trusted_proxies": "10.0.0.1"}, "api.trusted_proxies = '10.0.0.1': expected a list"),
    ({"trusted_proxies": ["10.0.0.1", "10.0.0.300"]}, "api.trusted_proxies = '10.0.0.300'"),
    ({"trusted_proxies": [167772161]}, "api.trusted_proxies = 167772161"),
])
def test_bad_api_settings_name_the_key(raw, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse({"api": raw})


def test_the_api_settings_need_a_restart():
    running = parse({"api": {"listen": "127.0.0.1:8765"}})
    with pytest.raises(ConfigError, match=r"\[api\] cannot change while the daemon runs"):
        check_reloadable(running, parse({"api": {"listen": "127.0.0.1:9999"}}))
    check_reloadable(running, parse({"api": {"listen": "127.0.0.1:8765"}}))


def test_trusted_proxies_are_addresses_or_networks():
    import ipaddress

    assert parse({}).api.trusted_proxies == ()
    proxies = parse({"api": {"trusted_proxies": ["127.0.0.1", "10.0.0.0/8", "::1"]}}).api
    assert proxies.trusted_proxies == tuple(ipaddress.ip_network(net) for net in (
        "127.0.0.1/32", "10.0.0.0/8", "::1/128"))
