// Builds CoreDNS at the version vCluster v0.36.1 deploys inside a v1.35 virtual cluster
// (pkg/constants/coredns.go: coredns/coredns:1.14.1).
module gputenant.io/tools/coredns

go 1.24.0

require github.com/coredns/coredns v1.14.1
