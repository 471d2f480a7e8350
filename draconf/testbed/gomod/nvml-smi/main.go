// Command nvidia-smi is draconf's stand-in for NVIDIA's nvidia-smi on beds that run NVIDIA's
// own DRA driver (draconf/testbed/upstream_nvidia.py).  NVIDIA's binary cannot be had there;
// this one asks NVML, through go-nvml, whatever libnvidia-ml.so.1 it finds, so what it prints
// is what that library reports, as with the real tool.  On the bed that library is NVIDIA's
// mock NVML (k8s-test-infra pkg/gpu/mocknvml), which shows a process only the GPUs whose
// /dev/nvidia<N> nodes it can see: in a container, the GPUs the DRA driver's CDI spec gave it.
//
// It lives in the driver root as usr/bin/nvidia-smi, where the driver's CDI spec finds it and
// mounts it into containers at /usr/bin/nvidia-smi, and where the chart's init container runs
// it (`nvidia-smi --version`) to see that a driver is installed.
//
// The library is looked for next to the binary, at ../lib64 (the driver root's usr/lib64, and
// /usr/lib64 in a container, where the CDI spec mounts the library), then by the loader's own
// search.
//
// What it answers, in nvidia-smi's output formats (driver 580):
//
//	--version                  the NVIDIA-SMI, NVML, driver and CUDA versions
//	-L, --list-gpus            "GPU <i>: <name> (UUID: <uuid>)"
//	--query-gpu=F,... --format=csv[,noheader][,nounits]
//	                           index, name, uuid, pci.bus_id, memory.total, memory.used,
//	                           memory.free, driver_version, compute_cap, compute_mode, count
//	-i, --id=I[,I]             only these GPUs (index or UUID)
//	-c, --compute-mode=M       set the compute mode (DEFAULT, EXCLUSIVE_PROCESS, PROHIBITED or
//	                           0, 3, 2), as NVIDIA's DRA plugin does for time-sliced GPUs
//	compute-policy [-i I] --set-timeslice N | -l
//	                           set (0 Default, 1 Short, 2 Medium, 3 Long) or list time slices
//
// GPU state the mock cannot hold.  The mock answers nvmlDeviceSetComputeMode with
// NOT_SUPPORTED and models no time slice at all; NVIDIA's driver sets both on every GPU it
// prepares with TimeSlicingSettings on.  A compute mode the library refuses is written into the
// mock's own runtime-override file (overrides.yaml beside its config.yaml, read back by the
// library within a second, engine/config_override_store.go), so NVML reports it from then on;
// time slices are kept in draconf-timeslices.json beside it.  The config directory is the one
// the mock itself reads: $MOCK_NVML_CONFIG's, else config/ two levels above the library.  Where
// it is read-only (a container) setting fails "Insufficient Permissions", exit 4, as an
// unprivileged nvidia-smi does.
//
// NVML failing to load or initialise ends it as nvidia-smi ends: "NVIDIA-SMI has failed because
// it couldn't communicate with the NVIDIA driver ...", exit 9; no GPU: "No devices were found",
// exit 6; anything else it does not know: exit 2 with a message naming it.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

const version = "580.00-draconf"

type gpu struct {
	index int
	dev   nvml.Device
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parse(args)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	lib := nvml.New(nvml.WithLibraryPath(libraryPath()))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		fmt.Fprintln(stdout, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "+
			"Make sure that the latest NVIDIA driver is installed and running.")
		return 9
	}
	defer lib.Shutdown()
	if opts.version {
		return printVersion(lib, stdout)
	}
	if opts.policy && !opts.listPolicy && opts.timeslice < 0 {
		fmt.Fprintln(stderr, "compute-policy needs --set-timeslice N or -l")
		return 2
	}
	gpus, code := selectGPUs(lib, opts.ids, stderr)
	if code != 0 {
		return code
	}
	if len(gpus) == 0 {
		fmt.Fprintln(stdout, "No devices were found")
		return 6
	}
	switch {
	case opts.mode != "":
		return setComputeMode(gpus, opts.mode, stdout, stderr)
	case opts.timeslice >= 0:
		return setTimeslice(gpus, opts.timeslice, stdout, stderr)
	case opts.listPolicy:
		return listPolicy(gpus, stdout)
	case opts.list:
		for _, g := range gpus {
			name, _ := g.dev.GetName()
			uuid, _ := g.dev.GetUUID()
			fmt.Fprintf(stdout, "GPU %d: %s (UUID: %s)\n", g.index, name, uuid)
		}
		return 0
	case len(opts.query) > 0:
		return printQuery(lib, gpus, opts, stdout, stderr)
	default:
		return printSummary(lib, gpus, stdout)
	}
}

type options struct {
	version, list, header, units bool
	query, ids                   []string
	mode                         string
	policy, listPolicy           bool
	timeslice                    int
}

func parse(args []string) (options, error) {
	o := options{header: true, units: true, timeslice: -1}
	if len(args) > 0 && args[0] == "compute-policy" {
		o.policy = true
		args = args[1:]
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		value := func(name string) (string, error) {
			if v, ok := strings.CutPrefix(arg, name+"="); ok {
				return v, nil
			}
			if i+1 < len(args) {
				i++
				return args[i], nil
			}
			return "", fmt.Errorf("option %s needs a value", name)
		}
		switch {
		case arg == "--version":
			o.version = true
		case o.policy && (arg == "-l" || arg == "--list"):
			o.listPolicy = true
		case o.policy && (arg == "--set-timeslice" || strings.HasPrefix(arg, "--set-timeslice=")):
			v, err := value("--set-timeslice")
			if err != nil {
				return o, err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n >= len(timeslices) {
				return o, fmt.Errorf("invalid timeslice %q: 0 (Default), 1 (Short), 2 (Medium) or 3 (Long)", v)
			}
			o.timeslice = n
		case !o.policy && (arg == "-c" || arg == "--compute-mode" || strings.HasPrefix(arg, "--compute-mode=")):
			v, err := value("--compute-mode")
			if err != nil {
				return o, err
			}
			if _, ok := modeNames[strings.ToUpper(v)]; !ok {
				return o, fmt.Errorf("invalid compute mode %q", v)
			}
			o.mode = strings.ToUpper(v)
		case arg == "-L" || arg == "--list-gpus":
			o.list = true
		case arg == "--query-gpu" || strings.HasPrefix(arg, "--query-gpu="):
			v, err := value("--query-gpu")
			if err != nil {
				return o, err
			}
			o.query = strings.Split(v, ",")
		case arg == "--format" || strings.HasPrefix(arg, "--format="):
			v, err := value("--format")
			if err != nil {
				return o, err
			}
			for _, f := range strings.Split(v, ",") {
				switch f {
				case "csv":
				case "noheader":
					o.header = false
				case "nounits":
					o.units = false
				default:
					return o, fmt.Errorf(`"%s" is not a valid format option`, f)
				}
			}
		case arg == "-i" || arg == "--id" || strings.HasPrefix(arg, "--id=") || strings.HasPrefix(arg, "-i="):
			name := "--id"
			if strings.HasPrefix(arg, "-i") {
				name = "-i"
			}
			v, err := value(name)
			if err != nil {
				return o, err
			}
			o.ids = strings.Split(v, ",")
		default:
			return o, fmt.Errorf("this nvidia-smi stand-in does not know %q (draconf test bed)", arg)
		}
	}
	return o, nil
}

// libraryPath is libnvidia-ml.so.1 in ../lib64 beside the binary when it is there, else the
// bare name for the loader to find.
func libraryPath() string {
	if exe, err := os.Executable(); err == nil {
		candidate := filepath.Join(filepath.Dir(exe), "..", "lib64", "libnvidia-ml.so.1")
		if _, err := os.Stat(candidate); err == nil {
			return candidate
		}
		matches, _ := filepath.Glob(filepath.Join(filepath.Dir(exe), "..", "lib64", "libnvidia-ml.so.*.*"))
		if len(matches) > 0 {
			return matches[0]
		}
	}
	return "libnvidia-ml.so.1"
}

func selectGPUs(lib nvml.Interface, ids []string, stderr io.Writer) ([]gpu, int) {
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		fmt.Fprintf(stderr, "Unable to determine the device count: %v\n", ret)
		return nil, 15
	}
	var all []gpu
	for i := 0; i < count; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			fmt.Fprintf(stderr, "Unable to determine the device handle for GPU%d: %v\n", i, ret)
			return nil, 15
		}
		all = append(all, gpu{i, dev})
	}
	picked := all
	if len(ids) > 0 {
		picked = nil
		for _, id := range ids {
			found := false
			for _, g := range all {
				uuid, _ := g.dev.GetUUID()
				if strconv.Itoa(g.index) == id || uuid == id {
					picked = append(picked, g)
					found = true
				}
			}
			if !found {
				fmt.Fprintf(stderr, "No devices were found matching %s\n", id)
				return nil, 6
			}
		}
	}
	// nvidia-smi queries every GPU it works on, so one that has fallen off the bus fails the
	// command at once, even -L; the GPUs it was not asked about do not.  A handle lookup is no
	// query: NVIDIA's mock reports a GPU lost (its failure injection, e.g. set through
	// overrides.yaml) from its first guarded call on.
	for _, g := range picked {
		if _, ret := g.dev.GetMemoryInfo(); ret == nvml.ERROR_GPU_IS_LOST {
			fmt.Fprintf(stderr, "Unable to determine the device handle for GPU%d: %v\n", g.index, ret)
			return nil, 15
		}
	}
	return picked, 0
}

func driverVersion(lib nvml.Interface) string {
	v, _ := lib.SystemGetDriverVersion()
	return v
}

func cudaVersion(lib nvml.Interface) string {
	v, ret := lib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return "N/A"
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

func printVersion(lib nvml.Interface, w io.Writer) int {
	nvmlVersion, _ := lib.SystemGetNVMLVersion()
	fmt.Fprintf(w, "NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\nCUDA Version        : %s\n",
		version, nvmlVersion, driverVersion(lib), cudaVersion(lib))
	return 0
}

// busID is the PCI bus id as nvidia-smi prints it: an eight-digit domain, upper case.
func busID(dev nvml.Device) string {
	info, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return "N/A"
	}
	var raw []byte
	for _, c := range info.BusId {
		if c == 0 {
			break
		}
		raw = append(raw, byte(c))
	}
	id := strings.ToUpper(string(raw))
	if parts := strings.SplitN(id, ":", 2); len(parts) == 2 && len(parts[0]) < 8 {
		id = strings.Repeat("0", 8-len(parts[0])) + id
	}
	return id
}

func mib(bytes uint64, units bool) string {
	if units {
		return fmt.Sprintf("%d MiB", bytes>>20)
	}
	return strconv.FormatUint(bytes>>20, 10)
}

var computeModes = map[nvml.ComputeMode]string{nvml.COMPUTEMODE_DEFAULT: "Default",
	nvml.COMPUTEMODE_EXCLUSIVE_THREAD: "Exclusive_Thread", nvml.COMPUTEMODE_PROHIBITED: "Prohibited",
	nvml.COMPUTEMODE_EXCLUSIVE_PROCESS: "Exclusive_Process"}

// headers are the column titles nvidia-smi prints for a field, with and without units.
var headers = map[string][2]string{"memory.total": {"memory.total [MiB]", "memory.total"},
	"memory.used": {"memory.used [MiB]", "memory.used"}, "memory.free": {"memory.free [MiB]", "memory.free"}}

func field(lib nvml.Interface, g gpu, name string, units bool, count int) (string, bool) {
	switch name {
	case "index":
		return strconv.Itoa(g.index), true
	case "count":
		return strconv.Itoa(count), true
	case "name", "gpu_name":
		v, _ := g.dev.GetName()
		return v, true
	case "uuid", "gpu_uuid":
		v, _ := g.dev.GetUUID()
		return v, true
	case "pci.bus_id", "gpu_bus_id":
		return busID(g.dev), true
	case "driver_version":
		return driverVersion(lib), true
	case "compute_cap":
		major, minor, ret := g.dev.GetCudaComputeCapability()
		if ret != nvml.SUCCESS {
			return "N/A", true
		}
		return fmt.Sprintf("%d.%d", major, minor), true
	case "compute_mode":
		mode, ret := g.dev.GetComputeMode()
		if ret != nvml.SUCCESS {
			return "N/A", true
		}
		return computeModes[mode], true
	case "memory.total", "memory.used", "memory.free":
		mem, ret := g.dev.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return "N/A", true
		}
		return mib(map[string]uint64{"memory.total": mem.Total, "memory.used": mem.Used,
			"memory.free": mem.Free}[name], units), true
	}
	return "", false
}

func printQuery(lib nvml.Interface, gpus []gpu, o options, w, stderr io.Writer) int {
	for _, name := range o.query {
		if _, ok := field(lib, gpus[0], name, o.units, len(gpus)); !ok {
			fmt.Fprintf(stderr, "Field \"%s\" is not a valid field to query.\n", name)
			return 2
		}
	}
	if o.header {
		titles := make([]string, len(o.query))
		for i, name := range o.query {
			titles[i] = name
			if h, ok := headers[name]; ok {
				titles[i] = h[0]
				if !o.units {
					titles[i] = h[1]
				}
			}
		}
		fmt.Fprintln(w, strings.Join(titles, ", "))
	}
	for _, g := range gpus {
		values := make([]string, len(o.query))
		for i, name := range o.query {
			values[i], _ = field(lib, g, name, o.units, len(gpus))
		}
		fmt.Fprintln(w, strings.Join(values, ", "))
	}
	return 0
}

func printSummary(lib nvml.Interface, gpus []gpu, w io.Writer) int {
	fmt.Fprintf(w, "NVIDIA-SMI %s    Driver Version: %s    CUDA Version: %s\n", version, driverVersion(lib), cudaVersion(lib))
	for _, g := range gpus {
		name, _ := g.dev.GetName()
		mem, _ := g.dev.GetMemoryInfo()
		fmt.Fprintf(w, "GPU %d  %s  %s  %s / %s\n", g.index, name, busID(g.dev), mib(mem.Used, true), mib(mem.Total, true))
	}
	return 0
}

// timeslices are the levels of `compute-policy --set-timeslice N`, by N.
var timeslices = []string{"Default", "Short", "Medium", "Long"}

// modeNames are -c's arguments; the mock's override file spells a mode in lower case.
var modeNames = map[string]nvml.ComputeMode{"DEFAULT": nvml.COMPUTEMODE_DEFAULT, "0": nvml.COMPUTEMODE_DEFAULT,
	"EXCLUSIVE_PROCESS": nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, "3": nvml.COMPUTEMODE_EXCLUSIVE_PROCESS,
	"PROHIBITED": nvml.COMPUTEMODE_PROHIBITED, "2": nvml.COMPUTEMODE_PROHIBITED}

// configDir is the directory of the mock's config.yaml, as the mock finds it.
func configDir() string {
	if p := os.Getenv("MOCK_NVML_CONFIG"); p != "" {
		return filepath.Dir(p)
	}
	return filepath.Join(filepath.Dir(libraryPath()), "..", "..", "config")
}

// updateJSON rewrites a JSON file (JSON is YAML too, for the mock's override file) through fn.
func updateJSON(path string, doc any, fn func()) error {
	if data, err := os.ReadFile(path); err == nil && len(data) > 0 {
		if err := json.Unmarshal(data, doc); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	fn()
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func insufficient(stderr io.Writer, what string, g gpu, err error) int {
	fmt.Fprintf(stderr, "Unable to set the %s for GPU %s: Insufficient Permissions (%v)\n", what, busID(g.dev), err)
	return 4
}

func setComputeMode(gpus []gpu, name string, stdout, stderr io.Writer) int {
	mode := modeNames[name]
	for _, g := range gpus {
		ret := g.dev.SetComputeMode(mode)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND {
			index, _ := g.dev.GetIndex()
			type override struct {
				Version int                       `json:"version"`
				All     map[string]any            `json:"all,omitempty"`
				Devices map[string]map[string]any `json:"devices,omitempty"`
			}
			doc := override{Version: 1}
			err := updateJSON(filepath.Join(configDir(), "overrides.yaml"), &doc, func() {
				if doc.Devices == nil {
					doc.Devices = map[string]map[string]any{}
				}
				if doc.Devices[strconv.Itoa(index)] == nil {
					doc.Devices[strconv.Itoa(index)] = map[string]any{}
				}
				doc.Devices[strconv.Itoa(index)]["compute_mode"] = strings.ToLower(computeModes[mode])
			})
			if err != nil {
				return insufficient(stderr, "compute mode", g, err)
			}
		} else if ret != nvml.SUCCESS {
			fmt.Fprintf(stderr, "Unable to set the compute mode for GPU %s: %v\n", busID(g.dev), ret)
			return 3
		}
		fmt.Fprintf(stdout, "Set compute mode to %s for GPU %s.\n", strings.ToUpper(computeModes[mode]), busID(g.dev))
	}
	fmt.Fprintln(stdout, "All done.")
	return 0
}

func timeslicePath() string { return filepath.Join(configDir(), "draconf-timeslices.json") }

func setTimeslice(gpus []gpu, level int, stdout, stderr io.Writer) int {
	for _, g := range gpus {
		uuid, _ := g.dev.GetUUID()
		doc := map[string]string{}
		if err := updateJSON(timeslicePath(), &doc, func() { doc[uuid] = timeslices[level] }); err != nil {
			return insufficient(stderr, "timeslice", g, err)
		}
		fmt.Fprintf(stdout, "Set timeslice to %s for GPU %s.\n", timeslices[level], busID(g.dev))
	}
	return 0
}

func listPolicy(gpus []gpu, stdout io.Writer) int {
	doc := map[string]string{}
	if data, err := os.ReadFile(timeslicePath()); err == nil {
		_ = json.Unmarshal(data, &doc)
	}
	fmt.Fprintln(stdout, "GPU compute policies:\nGPU  UUID                                      Timeslice")
	for _, g := range gpus {
		uuid, _ := g.dev.GetUUID()
		level := doc[uuid]
		if level == "" {
			level = "Default"
		}
		fmt.Fprintf(stdout, "%-4d %s  %s\n", g.index, uuid, level)
	}
	return 0
}
