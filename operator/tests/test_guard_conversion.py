"""The guard's conversion endpoint apart from the API server (guard.conversion): the CRD's
clientConfig for a Service or a URL, the merge patch that points the CRD at it, the flags, and
the answers to what is no ConversionReview. The API server's side: e2e/tests/test_guard_operator.py,
test_operator_incluster.py and test_api_versions_served.py."""

from __future__ import annotations

import argparse
import asyncio
import json

import pytest

from gputenant.guard.conversion import _converted, conversion_client_config, sync_crd_conversion
from gputenant.guard.flags import ONE_PORT_TWICE, add_webhook_arguments, check_webhook_arguments


def test_a_services_own_name_becomes_a_service_reference_on_the_conversion_port():
    config = conversion_client_config({"url": "https://gto-guard.gto-ns.svc:9443", "caBundle": "Q0E="}, 9444)
    assert config == {"service": {"namespace": "gto-ns", "name": "gto-guard", "port": 9444, "path": "/convert"},
                      "caBundle": "Q0E="}


@pytest.mark.parametrize("url, expected", [("https://127.0.0.1:9443", "https://127.0.0.1:9444/convert"),
                                           ("https://[fd00::1]:9443/", "https://[fd00::1]:9444/convert"),
                                           ("https://guard.example.com", "https://guard.example.com:9444/convert")])
def test_any_other_host_becomes_a_url_on_the_conversion_port(url, expected):
    assert conversion_client_config({"url": url}, 9444) == {"url": expected}


class RecordingClient:
    """Stands in for the API server's CRD endpoint: what the CRD holds and the patches sent."""

    def __init__(self, live: dict | None):
        self.live = live
        self.patches: list[dict] = []

    async def get(self, api_version, kind, name, namespace=None):
        return self.live

    async def patch(self, api_version, kind, name, patch, namespace=None, subresource=""):
        self.patches.append(patch)
        return self.live


def crd_with(client_config: dict) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gputenants.gputenant.io"}, "spec": {"conversion": {"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"], "clientConfig": client_config}}}}


def test_the_crd_is_patched_once_and_the_other_reference_removed():
    wanted = {"url": "https://127.0.0.1:9444/convert", "caBundle": "Q0E="}
    client = RecordingClient(crd_with({"service": {"namespace": "n", "name": "s", "path": "/convert"}}))
    assert asyncio.run(sync_crd_conversion(client, wanted)) is True
    [patch] = client.patches
    assert patch["spec"]["conversion"]["webhook"]["clientConfig"] == {"url": wanted["url"], "service": None,
                                                                      "caBundle": "Q0E="}
    client = RecordingClient(crd_with(wanted))
    assert asyncio.run(sync_crd_conversion(client, wanted)) is False and client.patches == []


def test_a_missing_crd_is_left_alone():
    client = RecordingClient(None)
    assert asyncio.run(sync_crd_conversion(client, {"url": "https://127.0.0.1:9444/convert"})) is False
    assert client.patches == []


def test_one_port_for_both_is_refused():
    parser = argparse.ArgumentParser()
    add_webhook_arguments(parser)
    with pytest.raises(ValueError, match="--webhook-conversion-port equals --webhook-port"):
        check_webhook_arguments(parser.parse_args(["--webhook-port", "9443", "--webhook-conversion-port", "9443"]))
    assert "port of its own" in ONE_PORT_TWICE
    check_webhook_arguments(parser.parse_args(["--webhook-port", "9443", "--webhook-conversion-port", "9444"]))


@pytest.mark.parametrize("body", ["not json", "[]", json.dumps({"kind": "AdmissionReview"})])
def test_what_is_no_conversion_review_is_refused(body):
    with pytest.raises(ValueError):
        _converted(body)


@pytest.mark.parametrize("request_body", [{"request": ["x"]}, {"request": {"desiredAPIVersion": "gputenant.io/v1beta1",
                                                                           "objects": "x"}},
                                          {"request": {"desiredAPIVersion": "gputenant.io/v1beta1", "objects": [
                                              {"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant",
                                               "metadata": "x"}]}}])
def test_a_malformed_review_is_answered_with_a_failure(request_body):
    answer = json.loads(json.dumps(_converted(json.dumps({"kind": "ConversionReview", **request_body}))))
    assert answer["response"]["result"]["status"] == "Failure"
