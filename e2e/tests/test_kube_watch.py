"""The metadata watch the drift repair stands on (`gputenant.kube.watch`), against the real API
server: only objects carrying the label, only their metadata (a Secret's data never crosses the
wire), each change reported with who wrote it, and a deletion reported. The Secrets are applied
server-side, as the operator writes its own: kubectl's client-side apply would copy their content
into the last-applied-configuration annotation, which is metadata."""

from __future__ import annotations

import asyncio
import base64
import json

from gputenant.kube import KubeClient
from gputenant.kube.watch import METADATA_ONE, Reflector, Seen

LABEL = "gputenant.io/tenant"
NAMESPACE = "watch-metadata"
MARKER = "a-secret-nobody-should-see"


def secret(name: str, labelled: bool) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": name, "namespace": NAMESPACE, "labels": {LABEL: "team-a"} if labelled else {}},
        "stringData": {"token": MARKER}}


def test_a_labelled_secret_is_seen_as_metadata_with_its_last_writer_and_its_deletion(plane):
    plane.create_namespace(NAMESPACE)
    plane.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(secret("unlabelled", False)))
    plane.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(secret("before", True)))

    async def scenario() -> tuple[dict, list[tuple[Seen | None, Seen | None]], list[bytes]]:
        changes: list[tuple[Seen | None, Seen | None]] = []
        async with KubeClient.from_kubeconfig(str(plane.kubeconfig_path), "gpu-tenant-operator") as client:
            reflector = Reflector(client, "v1", "Secret", LABEL, lambda before, after: changes.append((before, after)),
                                  owner_label=LABEL)
            task = asyncio.create_task(reflector.run())
            await asyncio.wait_for(reflector.synced.wait(), 30)
            listed = dict(reflector.objects)
            await asyncio.to_thread(plane.kubectl, "apply", "--server-side", "-f", "-",
                                    input=json.dumps(secret("after", True)))
            await asyncio.to_thread(plane.kubectl, "label", "secret", "after", "-n", NAMESPACE, "edited=yes")
            await asyncio.to_thread(plane.kubectl, "delete", "secret", "before", "-n", NAMESPACE)
            for _ in range(100):
                if len(changes) >= 3:
                    break
                await asyncio.sleep(0.1)
            task.cancel()
            resource = await client.resource("v1", "Secret")
            lines = []
            async for line in client.stream_lines(resource.path(None), {"watch": "1", "labelSelector": LABEL,
                                                                         "resourceVersion": "0", "timeoutSeconds": "1"},
                                                  METADATA_ONE, 10):
                lines.append(line)
        return listed, changes, lines

    listed, changes, lines = asyncio.run(scenario())
    assert [key for key in listed if key[0] == NAMESPACE] == [(NAMESPACE, "before")]
    ours = [(b.name if b else None, a.name if a else None) for b, a in changes if (a or b).namespace == NAMESPACE]
    assert ours == [(None, "after"), ("after", "after"), ("before", None)], ours
    created, labelled = changes[0][1], changes[1][1]
    assert created is not None and labelled is not None
    assert created.last_writer == "kubectl" and created.owner == "team-a"
    # managedFields times have whole seconds: a label in the same second as the create ties with it
    assert "kubectl-label" in labelled.last_writer.split(",")
    assert labelled.resource_version != created.resource_version
    wire = b"".join(lines)
    assert b"after" in wire and b'"kind":"PartialObjectMetadata"' in wire
    assert MARKER.encode() not in wire and base64.b64encode(MARKER.encode()) not in wire
    assert b'"data"' not in wire
