// Command pause is the process of the test bed's pod sandbox image: the Go equivalent of
// Kubernetes' build/pause/linux/pause.c.  It runs as PID 1 of the pod, waits forever, exits 0
// on SIGINT or SIGTERM, and reaps the zombies re-parented to it.  `pause -v` prints its version.
//
// Built static, so the image needs nothing else:
//
//	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o pause .
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// version matches the tag of the image it goes into (draconf.local/pause:3.10).
const version = "3.10"

func main() {
	for _, arg := range os.Args[1:] {
		if strings.EqualFold(arg, "-v") {
			fmt.Printf("pause.go %s (draconf)\n", version)
			return
		}
	}
	if os.Getpid() != 1 {
		fmt.Fprintf(os.Stderr, "pause: running as PID %d, not 1: orphans elsewhere are not reaped here\n", os.Getpid())
	}

	// Buffered: signals arriving while we reap are kept, not dropped (SIGCHLDs may still
	// coalesce, which is why reap loops until no child is left to collect).
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: %v received, exiting\n", sig)
		os.Exit(0)
	}
	// The signal channel is never closed; exit 42 as pause.c does if its wait loop ever ends.
	fmt.Fprintln(os.Stderr, "pause: stopped waiting for signals")
	os.Exit(42)
}

// reap collects every exited child without blocking, as pause.c's sigreap does.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
