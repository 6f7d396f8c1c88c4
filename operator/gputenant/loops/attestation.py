"""The isolation attestation loop (docs/attestation.md)."""

from __future__ import annotations

import asyncio
import logging

from gputenant.attestation.run import Attestor, publish_tenant_conditions
from gputenant.config.models import OperatorConfig
from gputenant.kube import ApiError, KubeClient

log = logging.getLogger(__name__)


async def keep_attestation(client: KubeClient, config: OperatorConfig, attestor: Attestor,
                           period_seconds: float) -> None:
    """Attest the pools that are due (one canary at a time), then bring every placed tenant's
    IsolationVerified in line with its pool's verdict (its own status writer, no tenant lock); every
    period. A failed API call is a warning and waits for the next one."""
    while True:
        try:
            await attestor.round(client, config)
            await publish_tenant_conditions(client, attestor)
        except ApiError as error:
            log.warning("isolation attestation: %s; retrying in %gs", error, period_seconds)
        await asyncio.sleep(period_seconds)
