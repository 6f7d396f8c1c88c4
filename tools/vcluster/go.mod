// Builds vCluster's syncer (`vcluster start`, the binary of the chart's control-plane image) at the
// version of the chart in ../shared/third_party. The proxy does not list vCluster's versions, so
// `go install ...@v0.36.1` fails; this module requires it and carries its go.sum instead.
module gputenant.io/tools/vcluster

go 1.26.3

require github.com/loft-sh/vcluster v0.36.1
