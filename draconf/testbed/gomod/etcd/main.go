// Command etcd is the upstream etcd server, built from the go.etcd.io/etcd/server/v3 module.
// go.etcd.io/etcd/server/v3 cannot be `go install`ed (its go.mod has replace directives), so
// this one-line main is the smallest way to build the real server from the module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
