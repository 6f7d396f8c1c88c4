#!/usr/bin/env bash
# Builds the pinned tools of the local cluster from Go modules into a git-ignored cache: the control
# plane (etcd, kube-apiserver, kube-controller-manager, kubectl, helm), the node (kubelet, kube-proxy,
# kube-scheduler, the project's pause and httpsget, plus Debian's containerd/runc/CNI installed with
# apt-get when missing), kwok for the simulated GPU nodes, and the KAI-Scheduler components; with
# --argocd also Argo CD. A binary already built at its pinned version is skipped, so a warm run costs
# a few milliseconds. The cache lives outside the clone (default ~/.cache/gputenant-operator/tools)
# so fresh clones reuse it; override with GPUTENANT_TOOLS_DIR.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin_dir=${GPUTENANT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gputenant-operator/tools}/bin
mkdir -p "$bin_dir"
bin_dir=$(cd "$bin_dir" && pwd)

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

# pinned versions: one place, read by the Python harness through `build.sh --versions`
KUBE_VERSION=v1.35.4
ETCD_VERSION=v3.6.16
HELM_VERSION=v3.22.0
KWOK_VERSION=v0.7.0
KAI_VERSION=v0.12.0
PAUSE_VERSION=1.0
HTTPSGET_VERSION=1.0
VCLUSTER_VERSION=v0.36.1
KINE_VERSION=v0.17.5
COREDNS_VERSION=v1.14.1
LOCAL_PATH_PROVISIONER_VERSION=v0.0.30
KUBE_ROUTER_VERSION=v2.1.0
METALLB_VERSION=v0.15.2
ARGOCD_VERSION=v3.6.1

if [[ ${1:-} == --versions ]]; then
  echo "kube=$KUBE_VERSION etcd=$ETCD_VERSION helm=$HELM_VERSION kwok=$KWOK_VERSION kai=$KAI_VERSION" \
    "pause=$PAUSE_VERSION httpsget=$HTTPSGET_VERSION vcluster=$VCLUSTER_VERSION kine=$KINE_VERSION" \
    "coredns=$COREDNS_VERSION local-path-provisioner=$LOCAL_PATH_PROVISIONER_VERSION" \
    "kube-router=$KUBE_ROUTER_VERSION" \
    "metallb=$METALLB_VERSION argocd=$ARGOCD_VERSION"
  exit 0
fi

# build NAME VERSION MODULE_DIR PACKAGE [LDFLAGS]: builds unless $bin_dir/NAME carries VERSION.
build() {
  local name=$1 version=$2 module=$3 package=$4 ldflags=${5:-}
  local stamp="$bin_dir/.$name.version"
  if [[ -x $bin_dir/$name && -f $stamp && $(cat "$stamp") == "$version" ]]; then
    echo "tools: $name $version cached"
    return
  fi
  echo "tools: building $name $version (a cold build takes minutes) ..."
  local start=$SECONDS
  (cd "$here/$module" && go build -trimpath -ldflags "-s -w $ldflags" -o "$bin_dir/$name" "$package")
  echo "$version" > "$stamp"
  echo "tools: built $name in $((SECONDS - start))s"
}

kube_ldflags() {
  local v=${KUBE_VERSION#v} pkg=k8s.io/component-base/version
  local major=${v%%.*} rest=${v#*.}
  echo "-X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=${rest%%.*} -X $pkg.gitTreeState=clean"
}

build etcd "$ETCD_VERSION" etcd .
build kube-apiserver "$KUBE_VERSION" kube k8s.io/kubernetes/cmd/kube-apiserver "$(kube_ldflags)"
build kube-controller-manager "$KUBE_VERSION" kube k8s.io/kubernetes/cmd/kube-controller-manager "$(kube_ldflags)"
build kubectl "$KUBE_VERSION" kube k8s.io/kubernetes/cmd/kubectl "$(kube_ldflags)"
build helm "$HELM_VERSION" helm helm.sh/helm/v3/cmd/helm \
  "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"

# The node: Debian's containerd, runc, CNI plugins, iptables (for kube-proxy), conntrack and a static
# busybox (the test image's root filesystem), ipset (for kube-router's network-policy controller); kubelet, kube-proxy and kube-scheduler from the same
# pinned module as the apiserver; the project's own pause program for pod sandboxes and HTTPS
# client for the test image. mmdebstrap writes the operator image's root filesystem from Debian
# packages (e2e/kubeplane/operator_image.py).
NODE_PACKAGES=(containerd runc containernetworking-plugins iptables conntrack ipset busybox-static mmdebstrap)
install_node_packages() {
  local package missing=()
  for package in "${NODE_PACKAGES[@]}"; do
    [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$package" 2>/dev/null) == ii* ]] || missing+=("$package")
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "tools: node packages installed"
    return
  fi
  echo "tools: installing ${missing[*]} with apt-get ..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
install_node_packages
build kubelet "$KUBE_VERSION" kube k8s.io/kubernetes/cmd/kubelet "$(kube_ldflags)"
build kube-proxy "$KUBE_VERSION" kube k8s.io/kubernetes/cmd/kube-proxy "$(kube_ldflags)"
build kube-scheduler "$KUBE_VERSION" kube k8s.io/kubernetes/cmd/kube-scheduler "$(kube_ldflags)"
build pause "$PAUSE_VERSION" pause .
build httpsget "$HTTPSGET_VERSION" httpsget .
# The node's NetworkPolicy enforcement: kube-router with only its firewall (network-policy
# controller) running, iptables and ipset inside the node's namespace (e2e/kubeplane/kube_router.py).
# v2.1.0 is the newest v2 version the module proxy serves (later tags answer 403 there).
build kube-router "$KUBE_ROUTER_VERSION" kube-router github.com/cloudnativelabs/kube-router/v2/cmd/kube-router \
  "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION"

# Simulated GPU nodes (kwok) and the real KAI-Scheduler components that enforce queues. KAI v0.12.0
# is the newest version the module proxy serves in full; its CRDs are read from the module cache
# (`go env GOMODCACHE`) by e2e/kubeplane/kai.py, never copied into the repository.
build kwok "$KWOK_VERSION" kwok sigs.k8s.io/kwok/cmd/kwok
kai_version="-X github.com/NVIDIA/KAI-scheduler/pkg/scheduler/version.gitVersion=$KAI_VERSION"
for component in scheduler binder podgrouper queuecontroller; do
  build "kai-$component" "$KAI_VERSION" kai "github.com/NVIDIA/KAI-scheduler/cmd/$component" "$kai_version"
done
# tools/kai/podgroupcontroller: upstream's main plus a flag for its metrics address (see there)
build kai-podgroupcontroller "$KAI_VERSION" kai ./podgroupcontroller

# The real vCluster (e2e/kubeplane/vcluster_images.py makes its images): the syncer at the chart's
# version (tools/vcluster: the proxy lists no vCluster versions and the checksum database does not
# answer for loft-sh modules, so the wrapper's go.sum pins them), kine for its embedded SQLite
# store (pure-Go SQLite without cgo), the CoreDNS it deploys for Kubernetes 1.35, and the dynamic
# provisioner behind the default StorageClass its data volume claim needs.
GONOSUMDB=github.com/loft-sh build vcluster "$VCLUSTER_VERSION" vcluster github.com/loft-sh/vcluster/cmd/vcluster \
  "-X github.com/loft-sh/vcluster/pkg/telemetry.SyncerVersion=${VCLUSTER_VERSION#v}"
build kine "$KINE_VERSION" kine github.com/k3s-io/kine "-X github.com/k3s-io/kine/pkg/version.Version=$KINE_VERSION"
build coredns "$COREDNS_VERSION" coredns github.com/coredns/coredns
build local-path-provisioner "$LOCAL_PATH_PROVISIONER_VERSION" local-path-provisioner \
  github.com/rancher/local-path-provisioner

# MetalLB in L2 mode, the load balancer behind vcluster.exposure LoadBalancer in the local cluster
# (e2e/kubeplane/metallb.py): its controller on the host, its speaker in the node's namespace. Its
# CRDs are read from the module cache. v0.15.2: v0.16.2 needs a frr-k8s the proxy refuses (tools/metallb/go.mod).
for component in controller speaker; do
  build "metallb-$component" "$METALLB_VERSION" metallb "go.universe.tf/metallb/$component"
done

# With --argocd only (the GitOps tests ask for it through e2e/kubeplane/argocd.py; nothing else pays
# for it): Argo CD's multi-call binary (ARGOCD_BINARY_NAME picks the application controller, repo
# server or ApplicationSet controller), built from tools/argocd, whose go.mod copies upstream's
# replace directives. v3.6.1 is the newest version the proxy serves; its go.mod needs Go 1.27, which
# the go command takes from the module proxy (GOTOOLCHAIN below). Its repo server runs Debian's git,
# its cache is Debian's redis.
if [[ ${1:-} == --argocd ]]; then
  NODE_PACKAGES=(redis-server git)
  install_node_packages
  GOTOOLCHAIN=go1.27.3 build argocd "$ARGOCD_VERSION" argocd github.com/argoproj/argo-cd/v3/cmd \
    "-X github.com/argoproj/argo-cd/v3/common.version=${ARGOCD_VERSION#v}"
fi
echo "tools: ready in $bin_dir"
