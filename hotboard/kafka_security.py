"""Connecting to a secured Kafka: the TLS and SASL settings every command that talks to Kafka shares, and the
one function that turns them into aiokafka keyword arguments, so the worker's consumer, its dead-letter
producer and the load generator cannot drift apart. Secrets come from files (or the environment), never need
the command line, and are masked wherever the settings are printed."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any, Literal, Self

from aiokafka.abc import AbstractTokenProvider
from aiokafka.helpers import create_ssl_context
from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]


class KafkaSecuritySettings(BaseSettings):
    """Mixed into the settings of every process kind that talks to Kafka (``HOTBOARD_KAFKA_*``)."""

    # An error must not echo the input: it holds the password.
    model_config = SettingsConfigDict(env_prefix="HOTBOARD_", frozen=True, extra="ignore", hide_input_in_errors=True)

    kafka_security_protocol: SecurityProtocol = Field(
        "PLAINTEXT", description="PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL over TLS)"
    )
    kafka_ssl_cafile: str = Field("", description="PEM file of the CA(s) that signed the brokers' certificates")
    kafka_ssl_certfile: str = Field("", description="PEM client certificate (chain), for brokers that require one")
    kafka_ssl_keyfile: str = Field("", description="PEM private key of the client certificate")
    kafka_ssl_key_password_file: str = Field("", description="File holding the password of an encrypted key")
    kafka_ssl_check_hostname: bool = Field(True, description="Check that a broker's certificate names its host")
    kafka_sasl_mechanism: SaslMechanism = Field(
        "PLAIN", description="SASL mechanism with SASL_*: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"
    )
    kafka_sasl_username: str = Field("", description="SASL user (PLAIN, SCRAM)")
    kafka_sasl_password: SecretStr = Field(
        SecretStr(""), description="SASL password (PLAIN, SCRAM); prefer the file, or the environment"
    )
    kafka_sasl_password_file: str = Field("", description="File holding the SASL password (PLAIN, SCRAM)")
    kafka_sasl_oauth_token_file: str = Field(
        "", description="OAUTHBEARER: file holding the access token, read again at each authentication"
    )

    @property
    def kafka_uses_tls(self) -> bool:
        return self.kafka_security_protocol in ("SSL", "SASL_SSL")

    @property
    def kafka_uses_sasl(self) -> bool:
        return self.kafka_security_protocol.startswith("SASL_")

    @model_validator(mode="after")
    def _complete(self) -> Self:
        """A missing secret or an unreadable file is a configuration error at start (exit 2, the setting
        named), not a retry loop against a broker that will never accept."""
        if self.kafka_sasl_password.get_secret_value() and self.kafka_sasl_password_file:
            raise ValueError("give kafka_sasl_password or kafka_sasl_password_file, not both")
        if self.kafka_uses_sasl:
            if self.kafka_sasl_mechanism == "OAUTHBEARER":
                if not self.kafka_sasl_oauth_token_file:
                    raise ValueError("OAUTHBEARER needs kafka_sasl_oauth_token_file")
                _read("kafka_sasl_oauth_token_file", self.kafka_sasl_oauth_token_file)
            elif not self.kafka_sasl_username or not sasl_password(self):
                raise ValueError(f"{self.kafka_sasl_mechanism} needs kafka_sasl_username and a password")
        if self.kafka_uses_tls:
            ssl_context(self)
        return self


def _read(name: str, path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise ValueError(f"{name}: cannot read {path}: {exc.strerror or exc}") from None


def sasl_password(s: KafkaSecuritySettings) -> str:
    if s.kafka_sasl_password_file:
        return _read("kafka_sasl_password_file", s.kafka_sasl_password_file)
    return s.kafka_sasl_password.get_secret_value()


def ssl_context(s: KafkaSecuritySettings) -> ssl.SSLContext:
    """Verified TLS: the given CA (else the system's), the client certificate if any, and the hostname checked
    unless turned off (the certificate is verified either way)."""
    for name in ("kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile", "kafka_ssl_key_password_file"):
        if path := getattr(s, name):
            _read(name, path)
    password = (
        _read("kafka_ssl_key_password_file", s.kafka_ssl_key_password_file) if s.kafka_ssl_key_password_file else None
    )
    try:
        context: ssl.SSLContext = create_ssl_context(
            cafile=s.kafka_ssl_cafile or None,
            certfile=s.kafka_ssl_certfile or None,
            keyfile=s.kafka_ssl_keyfile or None,
            password=password,
        )
    except ssl.SSLError as exc:
        raise ValueError(f"the Kafka TLS files cannot be used: {exc.reason or exc}") from None
    context.check_hostname = s.kafka_ssl_check_hostname
    return context


class FileTokenProvider(AbstractTokenProvider):  # type: ignore[misc]  # aiokafka ships no types
    """OAUTHBEARER: the token a sidecar (or a mounted Secret) keeps fresh in a file, read at each use."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    async def token(self) -> str:
        return (await asyncio.to_thread(self.path.read_text)).strip()

    def __repr__(self) -> str:
        return f"FileTokenProvider({str(self.path)!r})"


async def tls_failure(bootstrap: str, s: KafkaSecuritySettings, timeout_s: float = 2.0) -> str | None:
    """Why the TLS handshake with a bootstrap server fails, or None: aiokafka says only "Unable to bootstrap",
    and an operator needs "certificate verify failed: self-signed certificate" to fix a wrong CA."""
    context = ssl_context(s)
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            connecting = asyncio.open_connection(host.strip("[]"), int(port), ssl=context)
            _, writer = await asyncio.wait_for(connecting, timeout_s)
        except ssl.SSLError as exc:
            verify = getattr(exc, "verify_message", None)
            why = f"certificate verify failed: {verify}" if verify else exc.reason or str(exc)
            return f"TLS handshake with {server.strip()} failed: {why}"
        except (OSError, TimeoutError, ValueError):
            continue
        writer.close()
    return None


def client_kwargs(s: KafkaSecuritySettings) -> dict[str, Any]:
    """The security keyword arguments of every aiokafka client (consumer, producer, admin)."""
    kwargs: dict[str, Any] = {"security_protocol": s.kafka_security_protocol}
    if s.kafka_uses_tls:
        kwargs["ssl_context"] = ssl_context(s)
    if s.kafka_uses_sasl:
        kwargs["sasl_mechanism"] = s.kafka_sasl_mechanism
        if s.kafka_sasl_mechanism == "OAUTHBEARER":
            kwargs["sasl_oauth_token_provider"] = FileTokenProvider(s.kafka_sasl_oauth_token_file)
        else:
            kwargs["sasl_plain_username"] = s.kafka_sasl_username
            kwargs["sasl_plain_password"] = sasl_password(s)
    return kwargs
