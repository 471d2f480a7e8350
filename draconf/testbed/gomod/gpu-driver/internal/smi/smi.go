// Package smi is the nvidia-smi stand-in: what a container that received simulated GPUs
// through CDI sees.  It lists exactly the GPUs whose device nodes the container has:
// /dev/nvidia<N> character devices (major 195), identified by the minor number of the node
// (st_rdev, not the file name), looked up in the simulated NVML data and ordered by PCI bus
// id, as NVML enumerates them.
package smi

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"draconf.local/testbed/gpu-driver/internal/nvmlsim"
)

// Exit codes of the real nvidia-smi.
const (
	ExitOK           = 0
	ExitInvalidArgs  = 2
	ExitNoDevices    = 6
	ExitDriverFailed = 9
)

// Env is where the stand-in looks; Default is a container's view.
type Env struct {
	DevDir   string
	NVMLPath string
	// StateDir holds the GPUs' mutable state (nvmlsim.StateRelDir below the root).
	StateDir string
	// Stat reports a device node's rdev and whether it is a character device.
	Stat func(path string) (rdev uint64, isChar bool, err error)
	Now  func() time.Time
}

// Default is the environment inside a container: /dev and the nvml.json bind-mounted by the
// CDI spec.  NVIDIA_SIM_ROOT (not a real nvidia-smi variable) prefixes both, for running the
// stand-in on a node against its driver root.
func Default() Env {
	root := os.Getenv("NVIDIA_SIM_ROOT")
	if root == "" {
		root = "/"
	}
	return Env{
		DevDir:   filepath.Join(root, "dev"),
		NVMLPath: nvmlsim.Path(root),
		StateDir: nvmlsim.StateDir(root),
		Stat:     statRdev,
		Now:      time.Now,
	}
}

func statRdev(path string) (uint64, bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, false, err
	}
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return 0, false, nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false, nil
	}
	return uint64(st.Rdev), true, nil
}

// GPU is one visible GPU with its nvidia-smi index and its mutable state.
type GPU struct {
	Index int
	nvmlsim.GPU
	State nvmlsim.GPUState
	// MIGs are the MIG devices of this GPU the container was given (see mig.go).
	MIGs []nvmlsim.MigSlot
}

// VisibleGPUs returns the GPUs whose device nodes are in env.DevDir, in PCI bus id order.
func VisibleGPUs(env Env, data *nvmlsim.Data) ([]GPU, error) {
	paths, err := filepath.Glob(filepath.Join(env.DevDir, "nvidia[0-9]*"))
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	var gpus []nvmlsim.GPU
	for _, p := range paths {
		if _, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "nvidia")); err != nil {
			continue // e.g. nvidia0x: not a GPU node name
		}
		rdev, isChar, err := env.Stat(p)
		if err != nil || !isChar || nvmlsim.DevMajor(rdev) != nvmlsim.NvidiaMajor {
			continue
		}
		minor := nvmlsim.DevMinor(rdev)
		if seen[minor] {
			continue
		}
		if g, ok := data.ByMinor(minor); ok {
			seen[minor] = true
			gpus = append(gpus, g)
		}
	}
	sort.SliceStable(gpus, func(i, j int) bool {
		return strings.ToLower(gpus[i].PCIBusID) < strings.ToLower(gpus[j].PCIBusID)
	})
	out := make([]GPU, len(gpus))
	for i, g := range gpus {
		out[i] = GPU{Index: i, GPU: g}
	}
	visibleMigs(env, out)
	return out, nil
}

const driverFailed = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. " +
	"Make sure that the latest NVIDIA driver is installed and running.\n"

const invalidArgs = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"

type options struct {
	list bool
	// computeMode is -c/--compute-mode's value ("" when not given).
	computeMode string
	help        bool
	version     bool
	query       []string
	format      string
	ids         []string
}

func parseArgs(args []string) (*options, error) {
	o := &options{}
	value := func(i *int, arg, name string) (string, error) {
		if v, ok := strings.CutPrefix(arg, name+"="); ok {
			return v, nil
		}
		if *i+1 >= len(args) {
			return "", fmt.Errorf("missing value for %s", name)
		}
		*i++
		return args[*i], nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		var err error
		var v string
		switch {
		case a == "-L" || a == "--list-gpus":
			o.list = true
		case a == "-c" || a == "--compute-mode" || strings.HasPrefix(a, "--compute-mode="):
			name := "--compute-mode"
			if a == "-c" {
				name = "-c"
			}
			o.computeMode, err = value(&i, a, name)
		case a == "-h" || a == "--help":
			o.help = true
		case a == "--version":
			o.version = true
		case a == "--query-gpu" || strings.HasPrefix(a, "--query-gpu="):
			if v, err = value(&i, a, "--query-gpu"); err == nil {
				for _, f := range strings.Split(v, ",") {
					o.query = append(o.query, strings.TrimSpace(f))
				}
			}
		case a == "--format" || strings.HasPrefix(a, "--format="):
			v, err = value(&i, a, "--format")
			o.format = v
		case a == "-i" || a == "--id" || strings.HasPrefix(a, "--id="):
			name := "--id"
			if a == "-i" {
				name = "-i"
			}
			if v, err = value(&i, a, name); err == nil {
				o.ids = append(o.ids, strings.Split(v, ",")...)
			}
		default:
			return nil, fmt.Errorf("unknown argument %q", a)
		}
		if err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Run executes nvidia-smi with args and returns its exit status.
func Run(args []string, stdout, stderr io.Writer, env Env) int {
	if len(args) > 0 && args[0] == "compute-policy" {
		return runComputePolicy(args[1:], stdout, stderr, env)
	}
	o, err := parseArgs(args)
	if err != nil {
		fmt.Fprint(stdout, invalidArgs)
		return ExitInvalidArgs
	}
	if o.help {
		fmt.Fprint(stdout, usage)
		return ExitOK
	}
	var fields []field
	var csvOpts csvFormat
	if o.query != nil {
		for _, name := range o.query {
			f, ok := lookupField(name)
			if !ok {
				fmt.Fprintf(stderr, "Field \"%s\" is not a valid field to query.\n", name)
				return ExitInvalidArgs
			}
			fields = append(fields, f)
		}
		if csvOpts, err = parseFormat(o.format); err != nil {
			fmt.Fprint(stdout, invalidArgs)
			return ExitInvalidArgs
		}
	} else if o.format != "" {
		fmt.Fprint(stdout, invalidArgs)
		return ExitInvalidArgs
	}

	data, err := nvmlsim.LoadFile(env.NVMLPath)
	if err != nil {
		fmt.Fprint(stdout, driverFailed)
		if !errors.Is(err, nvmlsim.ErrNotFound) {
			fmt.Fprintf(stderr, "(simulated NVML: %v)\n", err)
		}
		return ExitDriverFailed
	}
	if o.version {
		printVersion(stdout, data)
		return ExitOK
	}
	gpus, code := loadGPUs(stdout, env, data)
	if code != ExitOK {
		return code
	}
	all := gpus
	if len(o.ids) > 0 {
		if gpus, err = selectIDs(gpus, o.ids); err != nil {
			fmt.Fprintf(stdout, "No devices were found\n")
			return ExitNoDevices
		}
	}
	switch {
	case o.computeMode != "":
		return setComputeMode(stdout, env, gpus, o.computeMode)
	case o.list:
		printList(stdout, gpus)
	case fields != nil:
		printQuery(stdout, fields, csvOpts, gpus, all, data)
	default:
		printSummary(stdout, gpus, data, env.Now())
	}
	return ExitOK
}

// selectIDs applies -i/--id: an index, a UUID or a PCI bus id.
func selectIDs(gpus []GPU, ids []string) ([]GPU, error) {
	var out []GPU
	for _, id := range ids {
		id = strings.TrimSpace(id)
		found := false
		for _, g := range gpus {
			if id == strconv.Itoa(g.Index) || id == g.UUID ||
				strings.EqualFold(id, g.PCIBusID) || strings.EqualFold(id, nvmlsim.BusIDLong(g.PCIBusID)) {
				out = append(out, g)
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("no GPU %q", id)
		}
	}
	return out, nil
}

func printVersion(w io.Writer, data *nvmlsim.Data) {
	nvmlVersion := data.DriverVersion
	if parts := strings.Split(nvmlVersion, "."); len(parts) >= 2 {
		nvmlVersion = parts[0] + "." + parts[1]
	}
	fmt.Fprintf(w, "NVIDIA-SMI version  : %s\n", data.DriverVersion)
	fmt.Fprintf(w, "NVML version        : %s\n", nvmlVersion)
	fmt.Fprintf(w, "DRIVER version      : %s\n", data.DriverVersion)
	fmt.Fprintf(w, "CUDA Version        : %s\n", data.CudaMajorMinor())
}

const usage = `NVIDIA System Management Interface -- v(simulated)

NVSMI provides monitoring information for the simulated NVIDIA GPUs of the draconf test bed.

Usage: nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.
          --version             Print version information and exit.
    -L,   --list-gpus           Display a list of GPUs connected to the system.
    -i,   --id=                 Target a specific GPU (index, UUID or PCI bus id).
          --query-gpu=          Information about GPU. Call --help-query-gpu for more info.
          --format=             Comma separated list of format options:
                                  csv - comma separated values (MANDATORY)
                                  noheader - skip the first line with column headers
                                  nounits - don't print units for numerical values
`

// loadGPUs is the GPUs the container sees, each with its state (compute mode, time slice), or
// the exit code nvidia-smi gives when it has none: no driver, or no device.
func loadGPUs(stdout io.Writer, env Env, data *nvmlsim.Data) ([]GPU, int) {
	gpus, err := VisibleGPUs(env, data)
	if err != nil {
		fmt.Fprint(stdout, driverFailed)
		return nil, ExitDriverFailed
	}
	if len(gpus) == 0 {
		fmt.Fprintln(stdout, "No devices were found")
		return nil, ExitNoDevices
	}
	for i := range gpus {
		if gpus[i].State, err = nvmlsim.LoadState(env.StateDir, gpus[i].UUID); err != nil {
			fmt.Fprint(stdout, driverFailed)
			return nil, ExitDriverFailed
		}
	}
	return gpus, ExitOK
}
