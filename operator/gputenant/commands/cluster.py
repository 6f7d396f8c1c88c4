"""The one way a command talks to the cluster: a missing kubeconfig, a cluster that does not
answer or an answer that is an error becomes one CommandError line naming the kubeconfig tried."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from gputenant.commands import CommandError

if TYPE_CHECKING:
    from gputenant.kube import KubeClient

T = TypeVar("T")


def with_cluster(kubeconfig: str | None, field_manager: str, work: Callable[[KubeClient], Awaitable[T]]) -> T:
    """Run `work` with a client of the cluster `kubeconfig` (None: $KUBECONFIG, ~/.kube/config,
    else in-cluster) names; its result, or CommandError."""
    import asyncio

    from gputenant.kube import ApiError, KubeClient, NoCluster
    from gputenant.kube.credentials import kubeconfig_source

    try:
        client = KubeClient.from_kubeconfig(kubeconfig, field_manager)
    except NoCluster as error:
        raise CommandError(str(error)) from None

    async def main() -> T:
        async with client:
            return await work(client)

    try:
        return asyncio.run(main())
    except ApiError as error:
        where = f"the cluster at {client.server} ({kubeconfig_source(kubeconfig)})"
        detail = " ".join(error.message.split())
        if error.status == 0:
            raise CommandError(f"cannot reach {where}: {detail}; check that the cluster runs and the kubeconfig "
                               "names it, or pass --kubeconfig FILE") from None
        raise CommandError(f"{where} answered {error.status} {error.reason}: {detail}") from None
