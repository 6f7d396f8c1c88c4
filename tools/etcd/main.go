// Command etcd runs the pinned etcd server through its etcdmain entry point, because etcd's own
// main package lives in a module with replace directives that `go build` cannot consume.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
