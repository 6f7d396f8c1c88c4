#!/usr/bin/env bash
# Builds every pinned tool the tests, the benches and `make dev` use, from Go modules, into a
# git-ignored cache: the control plane (etcd, kube-apiserver, kube-controller-manager, kubectl,
# helm), the node (kubelet, kube-proxy, kube-scheduler, kube-router, the project's pause and its
# httpsget and spoofudp test programs, plus Debian's containerd/runc/CNI, redis and git installed
# with apt-get when missing), kwok for the simulated GPU nodes, the KAI-Scheduler components, the real vCluster's syncer and its
# parts, MetalLB and Argo CD. No test builds a tool (operator/tests/test_no_tool_builds_in_tests.py):
# `make tools` runs this before pytest starts.
#
# A binary already built at its pinned version is skipped, so a warm run costs milliseconds. The
# cache lives outside the clone (default ~/.cache/gputenant-operator/tools) so fresh clones reuse
# it; override with GPUTENANT_TOOLS_DIR. `build.sh --list` prints the plan and builds nothing.
#
# `build.sh --compat` (`make tools-compat`, opt-in: CI never runs it) builds only the six Kubernetes
# binaries again at the oldest supported minor, KUBE_COMPAT_VERSION, from tools/kube-compat, by the
# same group as the pinned ones, into their own folder of the cache (kube-<version>/bin), so the
# pinned binaries are never touched; the harness runs them when GPUTENANT_KUBE_VERSION names that
# version (e2e/kubeplane/tools.py). `build.sh --compat --list` prints that plan.
#
# A cold build is mostly CPU: the modules are downloaded in the background while the first tools
# compile, the binaries of one module are built by one `go build` (they share its packages and their
# links overlap the compiles), and two lanes of builds run side by side so that one lane's links and
# package loading fill the other's idle core. Figures: docs/development.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
compat=0
if [[ ${1:-} == --compat ]]; then
  compat=1
  shift
fi
tools_root=${GPUTENANT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gputenant-operator/tools}
if [[ $compat -eq 1 ]]; then
  bin_dir=$tools_root/kube-$KUBE_COMPAT_VERSION/bin
else
  bin_dir=$tools_root/bin
fi
mkdir -p "$bin_dir"
bin_dir=$(cd "$bin_dir" && pwd)

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

kube_ldflags() {  # VERSION: what the binaries' --version and the API server's /version report
  local v=${1#v} pkg=k8s.io/component-base/version
  local major=${v%%.*} rest=${v#*.}
  echo "-X $pkg.gitVersion=$1 -X $pkg.gitMajor=$major -X $pkg.gitMinor=${rest%%.*} -X $pkg.gitTreeState=clean"
}

# The groups: one `go build` each, in its lane's order. group LANE VERSION MODULE_DIR LDFLAGS ENV NAME=PACKAGE...
# ENV holds the go command's extra settings (a toolchain, a checksum-database exception), or "".
G_LANE=() G_VERSION=() G_MODULE=() G_LDFLAGS=() G_ENV=() G_TOOLS=()
group() {
  G_LANE+=("$1") G_VERSION+=("$2") G_MODULE+=("$3") G_LDFLAGS+=("$4") G_ENV+=("$5")
  shift 5
  G_TOOLS+=("$*")
}

kube_group() {  # VERSION MODULE_DIR: the six binaries of k8s.io/kubernetes at VERSION, one `go build`
  group a "$1" "$2" "$(kube_ldflags "$1")" "" \
    kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
    kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
    kubectl=k8s.io/kubernetes/cmd/kubectl kubelet=k8s.io/kubernetes/cmd/kubelet \
    kube-proxy=k8s.io/kubernetes/cmd/kube-proxy kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler
}

if [[ $compat -eq 1 ]]; then
  # The oldest supported minor: its module's go.mod pins the staging modules at its release.
  kube_group "$KUBE_COMPAT_VERSION" kube-compat
else  # everything `make tools` builds, in two lanes
# Lane a: the control plane and node from Kubernetes' own module, then the vCluster's parts.
group a "$ETCD_VERSION" etcd "" "" etcd=.
kube_group "$KUBE_VERSION" kube
group a "$PAUSE_VERSION" pause "" "" pause=.
group a "$HTTPSGET_VERSION" httpsget "" "" httpsget=.
group a "$SPOOFUDP_VERSION" spoofudp "" "" spoofudp=.
# The real vCluster (e2e/kubeplane/vcluster_images.py makes its images): the syncer at the chart's
# version (tools/vcluster: the proxy lists no vCluster versions and the checksum database does not
# answer for loft-sh modules, so the wrapper's go.sum pins them), kine for its embedded SQLite
# store (pure-Go SQLite without cgo), the CoreDNS it deploys for Kubernetes 1.35, and the dynamic
# provisioner behind the default StorageClass its data volume claim needs.
group a "$VCLUSTER_VERSION" vcluster \
  "-X github.com/loft-sh/vcluster/pkg/telemetry.SyncerVersion=${VCLUSTER_VERSION#v}" \
  "GONOSUMDB=github.com/loft-sh" vcluster=github.com/loft-sh/vcluster/cmd/vcluster
group a "$KINE_VERSION" kine "-X github.com/k3s-io/kine/pkg/version.Version=$KINE_VERSION" "" \
  kine=github.com/k3s-io/kine
group a "$COREDNS_VERSION" coredns "" "" coredns=github.com/coredns/coredns
group a "$LOCAL_PATH_PROVISIONER_VERSION" local-path-provisioner "" "" \
  local-path-provisioner=github.com/rancher/local-path-provisioner

# Lane b: Argo CD first (the longest single build), then helm on the same toolchain (it reuses the
# Kubernetes v0.37 packages Argo CD compiled), the GPU scheduling side and the network.
# Argo CD's multi-call binary (ARGOCD_BINARY_NAME picks the application controller, repo server or
# ApplicationSet controller), built from tools/argocd, whose go.mod copies upstream's replace
# directives; its repo server runs Debian's git, its cache is Debian's redis.
group b "$ARGOCD_VERSION" argocd "-X github.com/argoproj/argo-cd/v3/common.version=${ARGOCD_VERSION#v}" \
  "GOTOOLCHAIN=$GO127_TOOLCHAIN" argocd=github.com/argoproj/argo-cd/v3/cmd
group b "$HELM_VERSION" helm "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
  "GOTOOLCHAIN=$GO127_TOOLCHAIN" helm=helm.sh/helm/v3/cmd/helm
# Simulated GPU nodes (kwok) and the real KAI-Scheduler components that enforce queues. KAI v0.12.0
# is the newest version the module proxy serves in full; its CRDs are read from the module cache
# (`go env GOMODCACHE`) by e2e/kubeplane/kai.py, never copied into the repository.
# tools/kai/podgroupcontroller is upstream's main plus a flag for its metrics address (see there).
group b "$KWOK_VERSION" kwok "" "" kwok=sigs.k8s.io/kwok/cmd/kwok
group b "$KAI_VERSION" kai "-X github.com/NVIDIA/KAI-scheduler/pkg/scheduler/version.gitVersion=$KAI_VERSION" "" \
  kai-scheduler=github.com/NVIDIA/KAI-scheduler/cmd/scheduler \
  kai-binder=github.com/NVIDIA/KAI-scheduler/cmd/binder \
  kai-podgrouper=github.com/NVIDIA/KAI-scheduler/cmd/podgrouper \
  kai-queuecontroller=github.com/NVIDIA/KAI-scheduler/cmd/queuecontroller \
  kai-podgroupcontroller=./podgroupcontroller
# The node's NetworkPolicy enforcement: kube-router with only its firewall (network-policy
# controller) running, iptables and ipset inside the node's namespace (e2e/kubeplane/kube_router.py).
# v2.1.0 is the newest v2 version the module proxy serves (later tags answer 403 there).
group b "$KUBE_ROUTER_VERSION" kube-router \
  "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION" "" \
  kube-router=github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
# MetalLB in L2 mode, the load balancer behind vcluster.exposure LoadBalancer in the local cluster
# (e2e/kubeplane/metallb.py): its controller on the host, its speaker in the node's namespace. Its
# CRDs are read from the module cache. v0.15.2: v0.16.2 needs a frr-k8s the proxy refuses (tools/metallb/go.mod).
group b "$METALLB_VERSION" metallb "" "" \
  metallb-controller=go.universe.tf/metallb/controller metallb-speaker=go.universe.tf/metallb/speaker
fi

# The node's Debian packages: containerd, runc, CNI plugins, iptables (for kube-proxy), conntrack, a
# static busybox (the test image's root filesystem), ipset (kube-router), mmdebstrap (the operator
# image's root filesystem, e2e/kubeplane/operator_image.py), and Argo CD's redis and git.
NODE_PACKAGES=(containerd runc containernetworking-plugins iptables conntrack ipset busybox-static mmdebstrap
               redis-server git)

is_current() {  # NAME VERSION: the binary is there, stamped with VERSION
  [[ -x $bin_dir/$1 && -f $bin_dir/.$1.version && $(cat "$bin_dir/.$1.version") == "$2" ]]
}

stale_tools() {  # GROUP_INDEX: the NAME=PACKAGE pairs of the group not built at its pin
  local i=$1 pair
  for pair in ${G_TOOLS[$i]}; do
    is_current "${pair%%=*}" "${G_VERSION[$i]}" || echo "$pair"
  done
}

print_plan() {
  local i pair name count=0 missing=0
  for i in "${!G_TOOLS[@]}"; do
    for pair in ${G_TOOLS[$i]}; do
      name=${pair%%=*} count=$((count + 1))
      if is_current "$name" "${G_VERSION[$i]}"; then
        echo "tools:   $name ${G_VERSION[$i]} (tools/${G_MODULE[$i]}): cached"
      else
        echo "tools:   $name ${G_VERSION[$i]} (tools/${G_MODULE[$i]}): to build, lane ${G_LANE[$i]}"
        missing=$((missing + 1))
      fi
    done
  done
  echo "tools: $count tools pinned, $missing to build, into $bin_dir"
}

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

prefetch_modules() {  # every stale group's modules, downloaded in the background while others compile
  local i
  for i in "${!G_TOOLS[@]}"; do
    [[ -n $(stale_tools "$i") ]] || continue
    (cd "$here/${G_MODULE[$i]}" && env ${G_ENV[$i]} go mod download >/dev/null 2>&1 || true) &
  done
}

build_group() {  # GROUP_INDEX: one `go build` of its stale binaries into a scratch folder, then moved in place
  local i=$1 pair names=() packages=() out start=$SECONDS
  for pair in $(stale_tools "$i"); do
    names+=("${pair%%=*}") packages+=("${pair#*=}")
  done
  [[ ${#names[@]} -gt 0 ]] || return 0
  echo "tools: building ${names[*]} ${G_VERSION[$i]} (a cold build takes minutes) ..."
  out=$(mktemp -d "$bin_dir/.build-XXXXXX")
  if [[ ${#names[@]} -eq 1 ]]; then
    (cd "$here/${G_MODULE[$i]}" && env ${G_ENV[$i]} go build -trimpath -gcflags=all=-dwarf=false \
      -ldflags "-s -w ${G_LDFLAGS[$i]}" -o "$out/${names[0]}" "${packages[0]}")
  else
    # One build, several main packages: each lands in $out under its package's last element.
    (cd "$here/${G_MODULE[$i]}" && env ${G_ENV[$i]} go build -trimpath -gcflags=all=-dwarf=false \
      -ldflags "-s -w ${G_LDFLAGS[$i]}" -o "$out/" "${packages[@]}")
    local k
    for k in "${!names[@]}"; do
      [[ ${names[$k]} == "$(basename "${packages[$k]}")" ]] || mv "$out/$(basename "${packages[$k]}")" "$out/${names[$k]}"
    done
  fi
  local name
  for name in "${names[@]}"; do
    mv "$out/$name" "$bin_dir/$name"
    echo "${G_VERSION[$i]}" > "$bin_dir/.$name.version"
  done
  rmdir "$out"
  echo "tools: built ${names[*]} in $((SECONDS - start))s"
}

run_lane() {  # LANE: its groups in order
  local i
  for i in "${!G_TOOLS[@]}"; do
    if [[ ${G_LANE[$i]} == "$1" ]]; then
      build_group "$i"
    fi
  done
}

print_plan
[[ ${1:-} == --list ]] && exit 0

# The node's packages come with `make tools`, which `make tools-compat`'s users run anyway.
[[ $compat -eq 1 ]] || install_node_packages
prefetch_modules
start=$SECONDS
run_lane a & lane_a=$!
run_lane b & lane_b=$!
failed=0
wait "$lane_a" || failed=1
wait "$lane_b" || failed=1
wait  # the module prefetches
if [[ $failed -ne 0 ]]; then
  echo "tools: a build failed (its output is above)" >&2
  exit 1
fi
echo "tools: ready in $bin_dir ($((SECONDS - start))s)"
