"""The GPU-memory sentinel's round: read FB_USED from Prometheus, judge it against the pods on
those nodes (`usage.sentinel`), record what it found on each Node, post an Event when memory
becomes held by no one and when it is released, and cordon the node when configured to.

The record is a Node annotation (JSON, one entry per suspect device with its ``since``), so the
grace period survives an operator restart and `gputenant pools` shows the same findings as the
operator's pool report. Written only when the suspects or their verdicts change. Never resets a GPU.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from gputenant.api import conditions as reasons
from gputenant.config.models import OperatorConfig
from gputenant.kube import KubeClient
from gputenant.metrics import UnheldMemoryFigures
from gputenant.pools.plan import node_name
from gputenant.pools.report import PoolReport
from gputenant.tables import align_columns
from gputenant.timefmt import parse_duration, parse_rfc3339, rfc3339
from gputenant.usage.prometheus import read_device_memory
from gputenant.usage.sentinel import UnheldMemory, judge_unheld_memory

log = logging.getLogger(__name__)

RECORD_ANNOTATION = "gputenant.io/gpu-memory-held-by-no-one"
CORDONED_ANNOTATION = "gputenant.io/cordoned-for-gpu-memory"
"""Set when the sentinel cordoned the node, so it uncordons only nodes it cordoned itself."""


@dataclass(frozen=True)
class Finding:
    """A device as recorded on its Node: held by no one since `since`; reported once past the grace."""

    memory: UnheldMemory
    reported_at: datetime | None


def recorded(node: dict) -> list[Finding]:
    """The findings in a Node's annotation (an unreadable one reads as none)."""
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(RECORD_ANNOTATION)
    try:
        entries = [(entry, parse_rfc3339(entry["since"])) for entry in (json.loads(text) if text else [])]
        return [Finding(UnheldMemory(node_name(node), entry["gpu"], entry.get("instance", ""), float(entry["mib"]),
                                     since), parse_rfc3339(entry.get("reportedAt")))
                for entry, since in entries if since is not None]
    except (ValueError, KeyError, TypeError, AttributeError):
        return []


def _record(findings: list[Finding]) -> str | None:
    entries = [{"gpu": f.memory.gpu, "instance": f.memory.instance, "mib": round(f.memory.used_mib),
                "since": rfc3339(f.memory.since), **({"reportedAt": rfc3339(f.reported_at)} if f.reported_at else {})}
               for f in findings]
    return json.dumps(entries, separators=(",", ":")) if entries else None


def _same(old: list[Finding], new: list[Finding]) -> bool:
    """Equal but for the MiB figures (they move with every read; the metric carries them)."""
    return [(f.memory.key, f.memory.since, f.reported_at) for f in old] == \
        [(f.memory.key, f.memory.since, f.reported_at) for f in new]


async def sentinel_round(client: KubeClient, config: OperatorConfig, prometheus_url: str, now: datetime,
                         pods: list[dict]) -> list[UnheldMemory]:
    """One round over every node the exporter reports (a node it reports nothing of keeps its record,
    so an exporter that is down releases nothing); `pods`: the cluster's pods (those on other nodes
    are ignored). Returns the devices reported held by no one."""
    settings = config.memory_sentinel
    devices = await asyncio.to_thread(read_device_memory, prometheus_url)
    nodes = {node_name(node): node for node in await client.list("v1", "Node")}
    previous = {name: recorded(node) for name, node in nodes.items()}
    verdict = judge_unheld_memory([d for d in devices if d.node in nodes], pods,
                                  [f.memory for found in previous.values() for f in found], now,
                                  floor_mib=settings.floor_mi_b, grace=parse_duration(settings.grace) or timedelta())
    reported_keys = {memory.key for memory in verdict.reported}
    reported = []
    read = {device.node for device in devices}
    for name, node in nodes.items():
        if name not in read:  # the exporter said nothing of it this time: its record stands
            reported += [f.memory for f in previous[name] if f.reported_at]
            continue
        before = {f.memory.key: f for f in previous[name]}
        findings = [Finding(s, (before[s.key].reported_at if s.key in before else None) or
                            (now if s.key in reported_keys else None)) for s in verdict.suspects if s.node == name]
        await _publish(client, node, previous[name], findings, now)
        if config.memory_sentinel.cordon:
            await _cordon(client, node, any(f.reported_at for f in findings))
        reported += [f.memory for f in findings if f.reported_at]
    return reported


async def _publish(client: KubeClient, node: dict, before: list[Finding], after: list[Finding], now: datetime) -> None:
    """The annotation when it changed, and an Event per device newly reported or released."""
    if _same(before, after):
        return
    name = node_name(node)
    await client.patch("v1", "Node", name, {"metadata": {"annotations": {RECORD_ANNOTATION: _record(after)}}})
    was = {f.memory.key for f in before if f.reported_at}
    now_reported = {f.memory.key: f.memory for f in after if f.reported_at}
    involved = {**node, "apiVersion": "v1", "kind": "Node"}
    for key, memory in now_reported.items():
        if key not in was:
            message = (f"GPU {memory.gpu}{_instance(memory)} holds {memory.used_mib:.0f} MiB that no live pod holds, "
                       f"since {rfc3339(memory.since)}; drain the node and reset the GPU (the operator never resets one)")
            log.warning("node %s: %s", name, message)
            await client.post_event(involved, "Warning", reasons.GPU_MEMORY_HELD_BY_NO_ONE, message, rfc3339(now))
    for key in sorted(was - set(now_reported)):
        message = f"GPU {key[1]}{' MIG instance ' + key[2] if key[2] else ''}: memory held by no one is released"
        log.info("node %s: %s", name, message)
        await client.post_event(involved, "Normal", reasons.GPU_MEMORY_RELEASED, message, rfc3339(now))


async def _cordon(client: KubeClient, node: dict, held: bool) -> None:
    """Cordon a node with memory held by no one; uncordon it once released, only if the sentinel cordoned it."""
    ours = CORDONED_ANNOTATION in ((node.get("metadata") or {}).get("annotations") or {})
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    if held and not unschedulable:
        await client.patch("v1", "Node", node_name(node), {"metadata": {"annotations": {CORDONED_ANNOTATION: "true"}},
                                                           "spec": {"unschedulable": True}})
    elif not held and ours:
        await client.patch("v1", "Node", node_name(node), {"metadata": {"annotations": {CORDONED_ANNOTATION: None}},
                                                           "spec": {"unschedulable": None}})


def _instance(memory: UnheldMemory) -> str:
    return f" (MIG instance {memory.instance})" if memory.instance else ""


def reported_on(nodes: list[dict]) -> list[UnheldMemory]:
    """What the sentinel reported, from the Nodes' annotations (`gputenant pools`)."""
    return [f.memory for node in nodes for f in recorded(node) if f.reported_at]


def attach_unheld_memory(reports: list[PoolReport], unheld: list[UnheldMemory]) -> None:
    """Each pool report gets the devices on its nodes that hold memory no one holds."""
    for report in reports:
        report.unheld_memory = [memory for memory in unheld if memory.node in report.nodes]


def unheld_figures(unheld: list[UnheldMemory]) -> list[UnheldMemoryFigures]:
    return [UnheldMemoryFigures(m.node, m.gpu, m.instance, m.used_mib) for m in unheld]


def format_unheld_memory(unheld: list[UnheldMemory]) -> str:
    """`gputenant pools`' second table: node, GPU, MiB and since when."""
    rows = [("NODE", "GPU", "MIG-INSTANCE", "MIB", "HELD-BY-NO-ONE-SINCE")] + [
        (m.node, m.gpu, m.instance or "-", f"{m.used_mib:.0f}", rfc3339(m.since)) for m in unheld]
    return align_columns(rows)
