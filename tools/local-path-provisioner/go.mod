// Builds Rancher's local-path-provisioner, the dynamic provisioner behind the local cluster's
// default StorageClass (vCluster keeps its data on a PersistentVolumeClaim).
module gputenant.io/tools/local-path-provisioner

go 1.23.0

require github.com/rancher/local-path-provisioner v0.0.30
