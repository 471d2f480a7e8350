// Package mpscontrol is the stand-in for nvidia-cuda-mps-control, the MPS control daemon of
// the NVIDIA driver, as the draconf bed's simulated driver root carries it
// (<driver root>/usr/bin/nvidia-cuda-mps-control, beside the nvidia-smi stand-in).
//
// The kubelet plugin runs it in the Deployment it creates per MPS config group, as the real
// plugin runs the driver's own (internal/plugin/mps.go): `nvidia-cuda-mps-control -d` starts
// the daemon, then each setting is piped into `nvidia-cuda-mps-control` (the client).  What a CUDA
// process in a container sees of the daemon is its pipe directory: the named pipe `control`
// there.  So the stand-in, as the daemon:
//
//   - `-d`: creates `control` (a FIFO) in CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps)
//     and logs the start, with CUDA_VISIBLE_DEVICES, to control.log in
//     CUDA_MPS_LOG_DIRECTORY (default /var/log/nvidia-mps), then returns as the real one
//     does once it has forked.  No process stays behind: there is no GPU for it to serve.
//   - no argument: the client; each line of stdin (a command such as
//     `set_default_active_thread_percentage 50`) is appended to control.log, so the commands
//     the daemon was given can be read back.  Without a daemon's pipe it fails, as the real
//     client does when no daemon runs.
//
// The log lines are the stand-in's own, each with a "[time Control pid] " prefix like the
// real control.log's; what the real daemon writes after it is not documented and not imitated.
//
// Simulated fault: NVIDIA_SIM_MPS_DAEMON=fail (set by the plugin under its mps-daemon-fails
// fault) makes `-d` fail at once, exit 1, as a daemon that cannot start on its GPUs.
package mpscontrol

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Defaults of the real daemon's directories.
const (
	DefaultPipeDirectory = "/tmp/nvidia-mps"
	DefaultLogDirectory  = "/var/log/nvidia-mps"
	// FaultEnv is how the plugin's mps-daemon-fails fault reaches the stand-in.
	FaultEnv = "NVIDIA_SIM_MPS_DAEMON"
	// SimulatedStartError is what `-d` prints under the fault.
	SimulatedStartError = "simulated: the MPS control daemon failed to start on its GPUs (fault mps-daemon-fails)"
)

// Run runs the stand-in with args; getenv reads the environment.  It returns the exit code.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	pipeDir := orDefault(getenv("CUDA_MPS_PIPE_DIRECTORY"), DefaultPipeDirectory)
	logDir := orDefault(getenv("CUDA_MPS_LOG_DIRECTORY"), DefaultLogDirectory)
	control := filepath.Join(pipeDir, "control")
	switch {
	case len(args) == 1 && args[0] == "-d":
		if getenv(FaultEnv) == "fail" {
			_ = appendLog(logDir, "ERROR "+SimulatedStartError)
			fmt.Fprintln(stderr, SimulatedStartError)
			return 1
		}
		for _, d := range []string{pipeDir, logDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				fmt.Fprintf(stderr, "cannot create %s: %v\n", d, err)
				return 1
			}
		}
		if err := syscall.Mkfifo(control, 0o666); err != nil && !errors.Is(err, os.ErrExist) {
			fmt.Fprintf(stderr, "cannot create %s: %v\n", control, err)
			return 1
		}
		if err := appendLog(logDir,
			"simulated MPS control daemon up, control pipe "+control,
			"started as: CUDA_VISIBLE_DEVICES="+getenv("CUDA_VISIBLE_DEVICES")+" nvidia-cuda-mps-control -d",
			"clients reach it with CUDA_MPS_PIPE_DIRECTORY="+pipeDir); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	case len(args) == 0:
		if fi, err := os.Stat(control); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			fmt.Fprintf(stderr, "no MPS control daemon: %s is not its control pipe\n", control)
			return 1
		}
		var lines []string
		scanner := bufio.NewScanner(stdin)
		for scanner.Scan() {
			if line := strings.TrimSpace(scanner.Text()); line != "" {
				lines = append(lines, line)
			}
		}
		if err := appendLog(logDir, lines...); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	default:
		fmt.Fprintln(stdout, "usage: nvidia-cuda-mps-control [-d]  (draconf stand-in: -d starts the daemon, "+
			"without arguments commands are read from stdin)")
		if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
			return 0
		}
		return 1
	}
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// appendLog adds lines to control.log in logDir.
func appendLog(logDir string, lines ...string) error {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(logDir, "control.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	prefix := fmt.Sprintf("[%s Control %d] ", time.Now().UTC().Format("2006-01-02 15:04:05.000"), os.Getpid())
	for _, l := range lines {
		if _, err := fmt.Fprintln(f, prefix+l); err != nil {
			return err
		}
	}
	return nil
}
