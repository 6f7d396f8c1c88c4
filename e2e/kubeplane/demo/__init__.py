"""`python -m kubeplane.demo up` (what `make dev` runs): the local demo. A real local control plane,
GPU nodes for the pools SIMULATED by kwok (kubeplane.gpu_nodes, kubeplane.kwok), the operator as a
subprocess, the example tenants, and a status table until they are Ready. It lives beside the
harness it drives, never in the shipped package.

Each tenant's vCluster is the REAL upstream chart (../shared/third_party), its pod running on the
plane's node and reached by NodePort at the node's address. `status` is pure; `session` does the IO.
"""
