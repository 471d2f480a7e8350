// Command nvidia-smi is the nvidia-smi stand-in of the draconf test bed's simulated NVIDIA
// driver.  The test bed copies it to <driver root>/usr/bin/nvidia-smi on each node; the
// simulated DRA kubelet plugin (cmd/gpu-kubelet-plugin) bind-mounts it read-only at
// /usr/bin/nvidia-smi into every container that gets GPUs through CDI, together with the
// simulated NVML data /usr/share/nvidia-sim/nvml.json.
//
// # What it simulates
//
// The GPUs and NVML: it lists exactly the GPUs whose device nodes the container received,
// found by enumerating /dev/nvidia[0-9]* character devices (major 195) and taking each
// node's minor number from its st_rdev (not from its file name), looked up in nvml.json and
// ordered by PCI bus id as NVML enumerates them.  So it shows what CDI injection really did.
//
// # What it mirrors
//
// The output of the real nvidia-smi (driver 580):
//
//   - -L / --list-gpus: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)";
//   - --query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version (also count,
//     compute_cap, memory.used, memory.free, gpu_name, gpu_uuid, gpu_bus_id) with
//     --format=csv[,noheader][,nounits]: real headers ("memory.total [MiB]"), "81559 MiB"
//     values, bus ids as "00000000:18:00.0"; an unknown field prints
//     `Field "x" is not a valid field to query.` and exits 2;
//   - -i/--id to select GPUs, --version, -h;
//   - the GPU state upstream's plugin changes for GPU sharing: -c/--compute-mode
//     (DEFAULT|EXCLUSIVE_PROCESS|PROHIBITED or 0|3|2, "Set compute mode to ... for GPU ...",
//     "All done."), --query-gpu=compute_mode ("Default", "Exclusive_Process"), and
//     `compute-policy [-i ID] --set-timeslice N` / `compute-policy -l` (the list's layout is
//     the stand-in's: GPU index, UUID, Timeslice level Default|Short|Medium|Long).  The state
//     is kept in <root>/run/nvidia-sim/gpus/<UUID>.json; a container sees it read-only, so
//     setting it there fails "Insufficient Permissions", exit 4;
//   - no arguments: the summary table (driver version, CUDA version, one block per GPU);
//   - no GPU device node: "No devices were found", exit 6; no nvml.json (no driver):
//     "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. ...",
//     exit 9.
//
// NVIDIA_SIM_ROOT (default /) prefixes /dev and the nvml.json path, to run it on a node
// against a driver root, or on a KWOK node against a container's view: there the bed's agent
// lays out, per container, what the CDI spec would have given it (device nodes, nvml.json and
// usr/bin/nvidia-smi), and kwok runs this binary from its sandbox with NVIDIA_SIM_ROOT set to
// that view.
//
// A view without usr/bin/nvidia-smi is a container that got no nvidia-smi mounted: the
// command is missing there, so it answers as the runtime does for a missing executable
// (message on stderr, exit status 127).
//
// # The nvml-flaky fault
//
// With NVIDIA_SIM_FLAKY=exec-once in its environment (the plugin's CDI spec adds it under
// that fault), the first nvidia-smi exec'd into a container (`kubectl exec`: its parent is
// outside the container's PID namespace, so getppid is 0, and it is not the container's
// PID 1) fails as NVML does when initialisation fails, "Failed to initialize NVML: Unknown
// Error", exit 255, and leaves a marker in the container's temporary directory; every later
// call works.  The container's own processes are never failed, so a Job still completes.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"draconf.local/testbed/gpu-driver/internal/smi"
)

// ExitNotFound is the status a shell (and kubectl exec) gives a command that does not exist.
const ExitNotFound = 127

func main() {
	root := os.Getenv("NVIDIA_SIM_ROOT")
	if root == "" {
		root = "/"
	}
	if _, err := os.Stat(filepath.Join(root, "usr", "bin", "nvidia-smi")); err != nil {
		fmt.Fprintln(os.Stderr, `OCI runtime exec failed: exec failed: unable to start container process: exec: `+
			`"nvidia-smi": executable file not found in $PATH: unknown`)
		os.Exit(ExitNotFound)
	}
	if flakesNow(os.Getenv("NVIDIA_SIM_FLAKY"), os.Getppid(), os.Getpid(), os.TempDir()) {
		fmt.Fprintln(os.Stdout, "Failed to initialize NVML: Unknown Error")
		os.Exit(ExitNVMLInitFailed)
	}
	os.Exit(smi.Run(os.Args[1:], os.Stdout, os.Stderr, smi.Default()))
}

// ExitNVMLInitFailed is nvidia-smi's status when NVML cannot be initialised.
const ExitNVMLInitFailed = 255

// flakesNow is true for the first exec'd call in a container under the nvml-flaky fault: it
// creates the marker in tmp, so only one call ever gets true.
func flakesNow(mode string, ppid, pid int, tmp string) bool {
	if mode != "exec-once" || ppid != 0 || pid == 1 {
		return false
	}
	f, err := os.OpenFile(filepath.Join(tmp, ".nvidia-sim-nvml-flaked"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false
	}
	f.Close()
	return true
}
