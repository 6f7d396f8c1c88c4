"""`python -m kubeplane.demo up` (what `make dev` runs): the local demo. A real local control plane,
GPU nodes for the pools SIMULATED by kwok (kubeplane.gpu_nodes, kubeplane.kwok), the operator as a
subprocess, the example tenants, and a status table until they are Ready. It lives beside the
harness it drives, never in the shipped package.

The vCluster pod cannot run here (no containers), so `kubeplane.vcluster_sim` plays it: a second
real kube-apiserver per tenant. `status` is pure; `session` does the IO.
"""
