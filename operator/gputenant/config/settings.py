"""The operator's environment: every ``GPUTENANT_*`` variable, read and validated in one object
before any client is built (a flag of ``gputenant run`` wins over its variable). `gputenant run
--help` lists them from this model, so the help and the code cannot disagree."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "GPUTENANT_"


def parse_metrics_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::]:9100`` for IPv6) -> (host, port); ValueError naming the fix otherwise."""
    host, _, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--metrics-address {address!r} (or ${ENV_PREFIX}METRICS_ADDRESS) is not HOST:PORT; give "
                         "e.g. 0.0.0.0:9100, or 127.0.0.1:9100 to serve only this host")
    return host, int(port)


class OperatorSettings(BaseSettings):
    """What the operator reads from its environment; an empty variable counts as unset."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid", frozen=True)

    config: Path | None = Field(None, description="operator configuration YAML (else built-in defaults)")
    resync_seconds: float = Field(
        36000.0, gt=0, description="seconds between safety-net resyncs of every tenant (drift is repaired on the "
        "change while the owned kinds are watched)")
    watch_owned: bool = Field(
        True, description="watch the kinds the operator writes for tenants and repair another hand's change at once "
        "(cluster-wide list and watch on them); false: drift waits for the resync")
    watch_owned_secrets: bool = Field(
        True, description="with watch_owned, watch the owned Secrets too (cluster-wide list and watch on Secrets)")
    loop_seconds: float | None = Field(
        None, gt=0, description="seconds between rounds of the usage, pools and attestation loops and before a "
        "failed loop or watch starts again (else the resync period, at most 60)")
    deletion_retry_seconds: float = Field(300.0, gt=0, description="seconds between retries of a blocked offboarding")
    helm_concurrency: int | None = Field(
        None, ge=1, description="helm processes at once, across all tenants (else twice the cores)")
    reconcile_concurrency: int | None = Field(
        None, ge=1,
        description="tenant reconciles in flight at once, looks again first and drift checks last (else eight times the cores)")
    metrics_address: str | None = Field(
        None, description="serve Prometheus metrics at http://HOST:PORT/metrics (else not served)")
    prometheus_url: str | None = Field(
        None, description="Prometheus scraping the DCGM exporter, for GPUs held against used (else off)")
    attestation_image: str | None = Field(
        None, description="the isolation canary's image (docs/attestation.md; else no pool is attested)")
    attestation_namespace: str | None = Field(
        None, description="namespace of the canary pods (else the configuration's operatorNamespace)")
    attestation_interval_seconds: float = Field(3600.0, gt=0, description="seconds between attestations of a pool")
    attestation_queue: str | None = Field(None, description="KAI queue of the canary pods (else none)")
    tools_dir: Path | None = Field(
        None, description="where bin/helm is (else ~/.cache/gputenant-operator/tools, then helm on PATH)")

    @field_validator("metrics_address")
    @classmethod
    def _host_and_port(cls, address: str | None) -> str | None:
        if address is not None:
            parse_metrics_address(address)
        return address

    @property
    def metrics_host_and_port(self) -> tuple[str, int] | None:
        return parse_metrics_address(self.metrics_address) if self.metrics_address else None


def env_name(setting: str) -> str:
    """The variable a setting is read from, e.g. ``GPUTENANT_HELM_CONCURRENCY``."""
    return f"{ENV_PREFIX}{setting.upper()}"


def environment_help() -> str:
    """Every variable with its meaning and default, for `gputenant run --help`."""
    lines = ["environment (a flag wins over its variable):"]
    for name, field in OperatorSettings.model_fields.items():
        default = "" if field.default is None else f" (default {_shown(field.default)})"
        lines.append(f"  {env_name(name):<40} {field.description}{default}")
    return "\n".join(lines)


def _shown(default: object) -> str:
    return str(default).lower() if isinstance(default, bool) else f"{default:g}"


def settings_problems(error: ValidationError, flags: dict[str, str]) -> str:
    """One line per invalid setting, naming its flag (when it has one) and its variable."""
    lines = []
    for problem in error.errors():
        name = str(problem["loc"][0]) if problem["loc"] else ""
        source = f"{flags[name]} (or ${env_name(name)})" if name in flags else f"${env_name(name)}"
        message = problem["msg"].removeprefix("Value error, ")
        lines.append(message if message.startswith(flags.get(name, "\0")) else f"{source}: {message}")
    return "\n".join(lines)
