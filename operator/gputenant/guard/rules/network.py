"""Rules on what a pod may do on the network beyond its NetworkPolicies: no raw sockets, hence no
forged source addresses (``guard.capabilities``)."""

from __future__ import annotations

from collections.abc import Iterator

from gputenant.guard.capabilities import added_spoofing, drops_spoofing, new_containers
from gputenant.guard.registry import Review, rule


@rule("raw-network", "a container that keeps `NET_RAW` or adds `NET_RAW`, `NET_ADMIN` or `ALL` back (raw sockets "
      "forge source addresses past NetworkPolicies; the guard drops `NET_RAW` itself)")
def _raw_network(review: Review) -> Iterator[str]:
    old = review.old if review.operation != "CREATE" else None
    for kind, _, container in new_containers(review.pod, old):
        name = f"{kind} {container.get('name')}"
        added = added_spoofing(container)
        if added:
            yield (f"{name} adds capabilities {', '.join(map(str, added))}, which forge packets past the tenant's "
                   "network policies (remove them from securityContext.capabilities.add)")
        if not drops_spoofing(container):
            yield (f"{name} keeps NET_RAW, which forges source addresses past the tenant's network policies "
                   "(the guard drops it: a webhook after the guard put it back; add NET_RAW to "
                   "securityContext.capabilities.drop)")
