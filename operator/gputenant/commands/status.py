"""`gputenant status`: for a tenant team, with its own vCluster kubeconfig: what it may ask for,
its quota and limit, what its queue holds and why a pod is Pending, usage, sleep and isolation. Reads
the view the operator keeps inside the virtual cluster (ConfigMap kube-public/gputenant,
docs/tenant-guide.md); needs no access to the host cluster."""

from __future__ import annotations

import argparse
import json
import sys

from gputenant.render.tenant_view import VIEW_KEY, VIRTUAL_NAME, VIRTUAL_NAMESPACE
from gputenant.tables import align_columns

HELP = "for tenants: your GPU entitlement, queue, why a pod is Pending, usage and sleep (vCluster kubeconfig)"
EXIT_UNREACHABLE = 1
EXIT_NO_VIEW = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="your vCluster kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table", help="table (default) or json")


def _number(value) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)


def ask_lines(ask: dict) -> list[str]:
    if not ask.get("possible"):
        return [f"GPUs: none can be granted now: {ask.get('why', '')}"]
    lines = [f"Ask for GPUs: {ask['how']}"]
    for caps in ask.get("hamiCaps") or []:
        lines.append(f"  gpu-fraction {caps['gpuFraction']}: capped at {caps['memoryMiB']} MiB of GPU memory and "
                     f"{caps['smPercent']}% of the SMs (HAMi-core, best effort)")
    lines.append(f"  example pod: kubectl get configmap -n {VIRTUAL_NAMESPACE} {VIRTUAL_NAME} "
                 "-o jsonpath='{.data.example-pod\\.yaml}' | kubectl apply -f -")
    return lines


def format_view(view: dict) -> str:
    """The view as text: a summary, then one table row per GPU pod of the queue."""
    queue = (view.get("quota") or {}).get("queue") or {}
    held = view.get("queue") or {}
    sleep = view.get("sleep") or {}
    isolation = view.get("isolationVerified") or {}
    lines = [f"Tenant {view['tenant']}: trust {view['trust']}, mechanism {view.get('mechanism') or '-'}, "
             f"pool {view.get('pool') or '-'}", *ask_lines(view.get("ask") or {})]
    if queue:
        lines.append(f"Queue {queue['name']}: quota {_number(queue['quota'])} {queue['unit']}, limit "
                     f"{_number(queue['limit'])}, allocated {_number(held.get('allocated', 0))}, "
                     f"pending pods {held.get('pending', 0)}")
    quota = ", ".join(f"{k}={v}" for k, v in sorted(((view.get("quota") or {}).get("resourceQuota") or {}).items()))
    lines.append(f"Namespace quota: {quota or '-'}")
    usage = view.get("usage")
    if usage:
        lines.append(f"Usage over {usage.get('window')}: {_number(usage.get('gpuHoursHeld', 0))} GPU-hours held, "
                     f"{_number(usage.get('gpuHoursUsed', 0))} used, {usage.get('idleGpuCount', 0)} idle GPUs"
                     + (", some GPUs busy but not working" if usage.get("busyNotWorking") else ""))
    idle = sleep.get("idlePolicy") or {}
    lines.append(f"Sleep: {sleep.get('state', '-')}" + (f", sleeps at {idle['sleepsAt']} if the GPUs stay idle"
                                                       if idle.get("sleepsAt") else "")
                 + (f", woken until at least {sleep['wokenUntil']}" if sleep.get("wokenUntil") else ""))
    lines.append(f"IsolationVerified: {isolation.get('status', 'Unknown')}"
                 + (f" ({isolation['reason']}: {isolation.get('message', '')})" if isolation.get("reason") else ""))
    rows = [("NAMESPACE", "POD", "GPUS", "STATE", "WHY PENDING")]
    rows += [(p["namespace"], p["name"], _number(p["gpus"]), p["state"], p.get("reason", ""))
             for p in held.get("pods") or []]
    text = "\n".join(lines) + "\n\n" + align_columns(rows) + "\n"
    if held.get("more"):
        text += f"... and {held['more']} more pods\n"
    return text


def read_view(kubeconfig: str | None) -> dict | None:
    """The view from the virtual cluster; None when it is not there (yet)."""
    import asyncio

    from gputenant.kube import KubeClient

    async def read() -> dict | None:
        async with KubeClient.from_kubeconfig(kubeconfig, "gputenant-status") as client:
            return await client.get("v1", "ConfigMap", VIRTUAL_NAME, VIRTUAL_NAMESPACE)

    found = asyncio.run(read())
    text = ((found or {}).get("data") or {}).get(VIEW_KEY)
    return json.loads(text) if text else None


def run(args: argparse.Namespace) -> int:
    try:
        view = read_view(args.kubeconfig)
    except Exception as error:  # noqa: BLE001 (ApiError, and the kubeconfig reader's ConfigException: both told)
        print(f"gputenant status: cannot read {VIRTUAL_NAMESPACE}/{VIRTUAL_NAME} from your virtual cluster: {error}. "
              "If it is asleep, an owner can wake it (docs/tenant-guide.md#wake-it)", file=sys.stderr)
        return EXIT_UNREACHABLE
    if view is None:
        print(f"gputenant status: no ConfigMap {VIRTUAL_NAMESPACE}/{VIRTUAL_NAME} in this cluster: is this your "
              "tenant vCluster's kubeconfig? The operator writes it once the tenant is set up", file=sys.stderr)
        return EXIT_NO_VIEW
    sys.stdout.write(json.dumps(view, indent=2, sort_keys=True) + "\n" if args.output == "json" else format_view(view))
    return 0
