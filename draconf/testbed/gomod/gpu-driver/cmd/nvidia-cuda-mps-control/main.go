// Command nvidia-cuda-mps-control is the MPS control daemon stand-in of the draconf bed's
// simulated NVIDIA driver; the bed copies it to <driver root>/usr/bin, where the MPS control
// daemon Deployment the kubelet plugin creates finds it on PATH.  See internal/mpscontrol.
package main

import (
	"os"

	"draconf.local/testbed/gpu-driver/internal/mpscontrol"
)

func main() {
	os.Exit(mpscontrol.Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}
