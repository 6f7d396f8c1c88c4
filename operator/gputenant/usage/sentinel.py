"""GPU memory held by no one ("zombie" memory): pure judgement of the DCGM exporter's
``DCGM_FI_DEV_FB_USED`` per GPU and MIG instance against the pods the cluster knows.

Memory used above a floor on a GPU that no live pod holds (the exporter names no pod, or only pods
that are gone or finished) is a *suspect* from the first read; one that stays so for longer than the
grace period is *held by no one*. A GPU with a live holder is never reported, however much memory it
uses: the holder owns it. The usual remedy (drain the node, reset the GPU) is left to a person; the
operator only reports, and cordons when configured to (docs/metrics.md, "GPU memory held by no one").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

FINISHED_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class DeviceMemory:
    """One GPU (or MIG instance) as the exporter reports it: its memory used and the pods it names."""

    node: str
    gpu: str
    """The GPU's UUID."""
    used_mib: float
    instance: str = ""
    """The MIG GPU instance id (``GPU_I_ID``); "" for a whole GPU."""
    holders: frozenset[tuple[str, str]] = frozenset()
    """(namespace, pod) of every series of this device that names a pod."""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.node, self.gpu, self.instance)


@dataclass(frozen=True)
class UnheldMemory:
    """Memory on a device that no live pod holds, and since when (the first read that saw it so)."""

    node: str
    gpu: str
    instance: str
    used_mib: float
    since: datetime

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.node, self.gpu, self.instance)


@dataclass(frozen=True)
class SentinelVerdict:
    suspects: list[UnheldMemory]
    """Every device now held by no one, reported or still within the grace period."""
    reported: list[UnheldMemory]
    """Those held by no one for longer than the grace period."""


def live(pod: dict) -> bool:
    """A pod that may still hold GPU memory: not finished (a terminating pod still runs)."""
    return (pod.get("status") or {}).get("phase") not in FINISHED_PHASES


def _mentions(pod: dict, gpu: str) -> bool:
    """The pod's annotations name the GPU (HAMi and KAI write the devices they assign there)."""
    return any(gpu in str(value) for value in ((pod.get("metadata") or {}).get("annotations") or {}).values())


@dataclass(frozen=True)
class LivePods:
    """The live pods, indexed once per round: by (namespace, name), and by node."""

    names: frozenset[tuple[str, str]]
    on_node: dict[str, list[dict]]

    @classmethod
    def of(cls, pods: list[dict]) -> LivePods:
        alive = [pod for pod in pods if live(pod)]
        on_node: dict[str, list[dict]] = {}
        for pod in alive:
            on_node.setdefault((pod.get("spec") or {}).get("nodeName") or "", []).append(pod)
        return cls(frozenset(((pod.get("metadata") or {}).get("namespace", ""),
                              (pod.get("metadata") or {}).get("name", "")) for pod in alive), on_node)


def has_live_holder(device: DeviceMemory, pods: LivePods) -> bool:
    """A live pod the exporter names on the device, or a live pod on its node whose annotations
    name the GPU."""
    return bool(device.holders & pods.names) or any(_mentions(pod, device.gpu)
                                                   for pod in pods.on_node.get(device.node, ()))


def judge_unheld_memory(devices: list[DeviceMemory], pods: list[dict], previous: list[UnheldMemory], now: datetime,
                        *, floor_mib: float, grace: timedelta) -> SentinelVerdict:
    """The suspects now (a suspect of `previous` keeps its ``since``) and those beyond `grace`.
    `pods`: the cluster's pods (at least those on the devices' nodes). A device whose memory
    dropped to the floor, or that a live pod holds again, leaves the suspects."""
    since = {suspect.key: suspect.since for suspect in previous}
    alive = LivePods.of(pods)
    suspects = sorted((UnheldMemory(d.node, d.gpu, d.instance, d.used_mib, since.get(d.key, now))
                       for d in devices if d.used_mib > floor_mib and not has_live_holder(d, alive)),
                      key=lambda suspect: suspect.key)
    return SentinelVerdict(suspects, [s for s in suspects if now - s.since >= grace])


def merge_devices(series: list[tuple[str, str, str, float, str, str]]) -> list[DeviceMemory]:
    """Devices from FB_USED series (node, gpu, instance, MiB, namespace, pod): one per device with
    every pod its series name and its largest figure (with ``KUBERNETES_VIRTUAL_GPUS`` the exporter
    splits a device by pod; the largest never over-reports what no one holds)."""
    devices: dict[tuple[str, str, str], DeviceMemory] = {}
    for node, gpu, instance, mib, namespace, pod in series:
        key = (node, gpu, instance)
        known = devices.get(key) or DeviceMemory(node, gpu, 0.0, instance)
        holders = known.holders | ({(namespace, pod)} if pod else set())
        devices[key] = replace(known, used_mib=max(known.used_mib, mib), holders=frozenset(holders))
    return sorted(devices.values(), key=lambda device: device.key)
