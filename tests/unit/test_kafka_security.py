"""The aiokafka security arguments, pinned for every protocol and SASL mechanism (the embedded test broker does
TLS through a proxy but cannot authenticate a SASL user), and secrets that never show."""

from __future__ import annotations

import asyncio
import importlib
import ssl
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from pydantic import ValidationError

from archive.audit import KafkaRange
from archive.settings import ArchiverSettings
from cli.main import build_parser, main
from cli.options import settings_from
from cli.removal import _log_end
from hotboard.kafka_security import FileTokenProvider, client_kwargs
from ingest.kafka_config import consumer_config, producer_config
from ingest.settings import WorkerSettings
from tests.tls import Certs, make_certs

SECRET = "Zq8xK2pW9vT4"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _without_context(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if k != "ssl_context"}


def test_plaintext_by_default() -> None:
    assert client_kwargs(WorkerSettings()) == {"security_protocol": "PLAINTEXT"}


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_sasl_user_and_password(protocol: str, mechanism: str, certs: Certs) -> None:
    settings = WorkerSettings(
        kafka_security_protocol=protocol,
        kafka_sasl_mechanism=mechanism,
        kafka_sasl_username="hotboard",
        kafka_sasl_password=SECRET,
        kafka_ssl_cafile=str(certs.ca),
    )
    kwargs = client_kwargs(settings)
    assert _without_context(kwargs) == {
        "security_protocol": protocol,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "hotboard",
        "sasl_plain_password": SECRET,
    }
    assert ("ssl_context" in kwargs) == (protocol == "SASL_SSL")
    # aiokafka accepts the combination (it checks the SASL arguments when a client is made).
    await AIOKafkaProducer(**kwargs).stop()


def test_every_client_of_the_worker_carries_the_same_security(certs: Certs) -> None:
    settings = WorkerSettings(
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="hotboard",
        kafka_sasl_password=SECRET,
        kafka_ssl_cafile=str(certs.ca),
    )
    for config in (consumer_config(settings), producer_config(settings)):
        assert _without_context(config) | _without_context(client_kwargs(settings)) == _without_context(config)
        assert isinstance(config["ssl_context"], ssl.SSLContext)


def test_tls_verifies_the_chain_and_the_hostname_unless_told(certs: Certs) -> None:
    tls: dict[str, Any] = {"kafka_security_protocol": "SSL", "kafka_ssl_cafile": str(certs.ca)}
    checked = client_kwargs(WorkerSettings(**tls))["ssl_context"]
    assert checked.check_hostname and checked.verify_mode == ssl.CERT_REQUIRED
    unchecked = client_kwargs(WorkerSettings(**tls, kafka_ssl_check_hostname=False))["ssl_context"]
    assert not unchecked.check_hostname and unchecked.verify_mode == ssl.CERT_REQUIRED


def test_a_client_key_that_does_not_match_its_certificate_is_a_configuration_error(certs: Certs) -> None:
    with pytest.raises(ValidationError, match="TLS files cannot be used"):
        WorkerSettings(
            kafka_security_protocol="SSL",
            kafka_ssl_certfile=str(certs.client_cert),
            kafka_ssl_keyfile=str(certs.server_key),
        )


def test_the_password_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "password").write_text(SECRET + "\n")
    monkeypatch.setenv("HOTBOARD_KAFKA_SASL_PASSWORD_FILE", str(tmp_path / "password"))
    args = build_parser().parse_args(
        ["worker", "--kafka-security-protocol", "SASL_PLAINTEXT", "--kafka-sasl-username", "u"]
    )
    assert client_kwargs(settings_from(WorkerSettings, args))["sasl_plain_password"] == SECRET


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"kafka_sasl_username": "u"}, "needs kafka_sasl_username and a password"),
        ({"kafka_sasl_password": SECRET}, "needs kafka_sasl_username and a password"),
        ({"kafka_sasl_username": "u", "kafka_sasl_password_file": "/nonexistent/pw"}, "kafka_sasl_password_file"),
        ({"kafka_sasl_password": SECRET, "kafka_sasl_password_file": "/etc/hostname"}, "not both"),
        ({"kafka_sasl_mechanism": "OAUTHBEARER"}, "OAUTHBEARER needs kafka_sasl_oauth_token_file"),
    ],
)
def test_an_incomplete_sasl_configuration_is_refused_at_start(settings: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError, match=error) as raised:
        WorkerSettings(kafka_security_protocol="SASL_PLAINTEXT", **settings)
    assert SECRET not in str(raised.value)


def test_a_missing_ca_file_names_the_setting() -> None:
    with pytest.raises(ValidationError, match=r"kafka_ssl_cafile: cannot read /nonexistent/ca\.pem"):
        WorkerSettings(kafka_security_protocol="SSL", kafka_ssl_cafile="/nonexistent/ca.pem")


def test_the_password_never_shows() -> None:
    settings = WorkerSettings(kafka_sasl_username="u", kafka_sasl_password=SECRET)
    for text in (repr(settings), str(settings), settings.model_dump_json()):
        assert SECRET not in text
    assert settings.kafka_sasl_password.get_secret_value() == SECRET


async def test_oauthbearer_reads_the_token_file_at_each_authentication(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    settings = WorkerSettings(
        kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism="OAUTHBEARER", kafka_sasl_oauth_token_file=str(token)
    )
    kwargs = client_kwargs(settings)
    provider = kwargs["sasl_oauth_token_provider"]
    assert isinstance(provider, FileTokenProvider)
    assert _without_context(kwargs) == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": provider,
    }
    assert await provider.token() == "first"
    token.write_text("rotated")
    assert await provider.token() == "rotated"
    await AIOKafkaConsumer(**kwargs).stop()


def test_produce_takes_the_security_options() -> None:
    options = ["--kafka-security-protocol", "SSL", "--kafka-ssl-check-hostname", "false"]
    args = build_parser().parse_args(["produce", *options])
    settings = settings_from(WorkerSettings, args)
    assert (settings.kafka_security_protocol, settings.kafka_ssl_check_hostname) == ("SSL", False)


class Built(Exception):
    """Raised by a stand-in aiokafka client: the keyword arguments a command built it with."""


def _recorder(*_: object, **kwargs: Any) -> None:
    raise Built(kwargs)


@pytest.mark.parametrize(
    ("module", "client", "argv"),
    [
        ("cli.dlq", "AIOKafkaConsumer", ["dlq"]),
        ("cli.send", "AIOKafkaProducer", ["send", "--player", "p", "--delta", "1"]),
        ("archive.audit", "AIOKafkaConsumer", ["audit"]),  # its KafkaRange, which rebuild reads through too
        ("cli.log_ends", "AIOKafkaConsumer", ["rebuild", "--all"]),
        ("cli.log_ends", "AIOKafkaConsumer", ["boards", "delete", "b"]),  # the delete point, erase's mark
    ],
)
def test_every_other_kafka_client_carries_the_same_security(
    module: str, client: str, argv: list[str], certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    tls: dict[str, Any] = {"kafka_security_protocol": "SASL_SSL", "kafka_sasl_mechanism": "SCRAM-SHA-512"}
    tls |= {"kafka_sasl_username": "hotboard", "kafka_sasl_password": SECRET, "kafka_ssl_cafile": str(certs.ca)}
    options = [arg for name, value in tls.items() for arg in ("--" + name.replace("_", "-"), value)]
    monkeypatch.setattr(importlib.import_module(module), client, _recorder)
    with pytest.raises(Built) as built:
        if argv[0] == "audit":
            KafkaRange(ArchiverSettings(**tls))
        elif argv[0] == "boards":
            asyncio.run(_log_end(build_parser().parse_args([*argv, *options])))
        else:
            main([*argv, *options])
    config = built.value.args[0]
    assert _without_context(config) | _without_context(client_kwargs(WorkerSettings(**tls))) == _without_context(config)
    assert isinstance(config["ssl_context"], ssl.SSLContext)
