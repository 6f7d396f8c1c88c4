// The pause program of the local node's pod sandboxes, written by the project (no registry here).
module gputenant.io/tools/pause

go 1.25.0
