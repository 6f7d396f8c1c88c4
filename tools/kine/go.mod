// Builds kine, the etcd API over SQLite that vCluster's embedded backing store runs from /binaries
// (pure Go SQLite when built without cgo).
module gputenant.io/tools/kine

go 1.26.5

require github.com/k3s-io/kine v0.17.5
