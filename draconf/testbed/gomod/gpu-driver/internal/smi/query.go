package smi

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"draconf.local/testbed/gpu-driver/internal/nvmlsim"
)

// field is one --query-gpu property: its CSV header (as real nvidia-smi prints it, with the
// unit in brackets for numbers that have one) and its value with and without unit.
type field struct {
	header string
	value  func(g GPU, gpus []GPU, d *nvmlsim.Data) (withUnit, noUnit string)
}

func plain(f func(g GPU, gpus []GPU, d *nvmlsim.Data) string) func(GPU, []GPU, *nvmlsim.Data) (string, string) {
	return func(g GPU, gpus []GPU, d *nvmlsim.Data) (string, string) {
		v := f(g, gpus, d)
		return v, v
	}
}

func mib(f func(g GPU) uint64) func(GPU, []GPU, *nvmlsim.Data) (string, string) {
	return func(g GPU, _ []GPU, _ *nvmlsim.Data) (string, string) {
		v := strconv.FormatUint(f(g), 10)
		return v + " MiB", v
	}
}

func totalMiB(g GPU) uint64 { return g.MemoryBytes >> 20 }

var fields = map[string]field{
	"index": {"index", plain(func(g GPU, _ []GPU, _ *nvmlsim.Data) string { return strconv.Itoa(g.Index) })},
	"count": {"count", plain(func(_ GPU, gpus []GPU, _ *nvmlsim.Data) string { return strconv.Itoa(len(gpus)) })},
	"name":  {"name", plain(func(g GPU, _ []GPU, _ *nvmlsim.Data) string { return g.ProductName })},
	"uuid":  {"uuid", plain(func(g GPU, _ []GPU, _ *nvmlsim.Data) string { return g.UUID })},
	"pci.bus_id": {"pci.bus_id", plain(func(g GPU, _ []GPU, _ *nvmlsim.Data) string {
		return nvmlsim.BusIDLong(g.PCIBusID)
	})},
	"driver_version": {"driver_version", plain(func(_ GPU, _ []GPU, d *nvmlsim.Data) string { return d.DriverVersion })},
	"compute_cap": {"compute_cap", plain(func(g GPU, _ []GPU, _ *nvmlsim.Data) string {
		return g.CudaComputeCapability
	})},
	"compute_mode": {"compute_mode", plain(func(g GPU, _ []GPU, _ *nvmlsim.Data) string { return g.State.Mode() })},
	"memory.total": {"memory.total [MiB]", mib(totalMiB)},
	"memory.used":  {"memory.used [MiB]", mib(func(GPU) uint64 { return 0 })},
	"memory.free":  {"memory.free [MiB]", mib(totalMiB)},
}

// aliases are the alternative names nvidia-smi --help-query-gpu lists.
var aliases = map[string]string{
	"gpu_name":   "name",
	"gpu_uuid":   "uuid",
	"gpu_bus_id": "pci.bus_id",
}

func lookupField(name string) (field, bool) {
	if a, ok := aliases[name]; ok {
		name = a
	}
	f, ok := fields[name]
	return f, ok
}

type csvFormat struct {
	noHeader bool
	noUnits  bool
}

// parseFormat reads --format: a comma-separated list with csv and optionally noheader and
// nounits.  The real nvidia-smi requires --format with --query-gpu; an omitted one is taken
// as plain csv here.
func parseFormat(s string) (csvFormat, error) {
	var f csvFormat
	if s == "" {
		return f, nil
	}
	hasCSV := false
	for _, opt := range strings.Split(s, ",") {
		switch strings.TrimSpace(opt) {
		case "csv":
			hasCSV = true
		case "noheader":
			f.noHeader = true
		case "nounits":
			f.noUnits = true
		default:
			return f, fmt.Errorf("invalid format option %q", opt)
		}
	}
	if !hasCSV {
		return f, errors.New("csv is mandatory")
	}
	return f, nil
}

// printQuery prints the selected GPUs; all is every visible GPU (for count).
func printQuery(w io.Writer, fs []field, format csvFormat, gpus, all []GPU, data *nvmlsim.Data) {
	if !format.noHeader {
		headers := make([]string, len(fs))
		for i, f := range fs {
			headers[i] = f.header
		}
		fmt.Fprintln(w, strings.Join(headers, ", "))
	}
	for _, g := range gpus {
		values := make([]string, len(fs))
		for i, f := range fs {
			withUnit, noUnit := f.value(g, all, data)
			if format.noUnits {
				values[i] = noUnit
			} else {
				values[i] = withUnit
			}
		}
		fmt.Fprintln(w, strings.Join(values, ", "))
	}
}
