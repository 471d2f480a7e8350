// Package nvmlsim is the simulated NVML: the one place where the simulated GPU hardware of a
// node is described.  The test bed writes it from its inventory to
// <driverRoot>/usr/share/nvidia-sim/nvml.json, beside the simulated device nodes
// <driverRoot>/dev/nvidia<minor> (character devices, major 195) and the nvidia-smi stand-in
// <driverRoot>/usr/bin/nvidia-smi.  Both the kubelet plugin (instead of libnvidia-ml.so.1) and
// the nvidia-smi stand-in read it; nothing else about the driver is simulated.
package nvmlsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// RelPath is where the data lives below a driver root, on the node and (bind-mounted by the
// CDI spec) inside a container.
const RelPath = "usr/share/nvidia-sim/nvml.json"

// NvidiaMajor is the character-device major number of /dev/nvidia<minor> and /dev/nvidiactl.
const NvidiaMajor = 195

// NvidiactlMinor is the minor number of /dev/nvidiactl.
const NvidiactlMinor = 255

// Data is the content of nvml.json.
type Data struct {
	// DriverVersion as nvmlSystemGetDriverVersion returns it, e.g. "580.95.05".
	DriverVersion string `json:"driverVersion"`
	// CudaDriverVersion as "major.minor" (nvmlSystemGetCudaDriverVersion formatted the way
	// the NVIDIA plugin does it), e.g. "13.0"; "13.0.0" is accepted too.
	CudaDriverVersion string `json:"cudaDriverVersion"`
	GPUs              []GPU  `json:"gpus"`
}

// GPU is one physical GPU as NVML reports it.
type GPU struct {
	Minor                 int    `json:"minor"`
	UUID                  string `json:"uuid"`
	ProductName           string `json:"productName"`
	Brand                 string `json:"brand"`
	Architecture          string `json:"architecture"`
	CudaComputeCapability string `json:"cudaComputeCapability"`
	// PCIBusID in the form go-nvlib returns it ("0000:18:00.0").
	PCIBusID string `json:"pciBusID"`
	// PCIeRoot is the PCIe root complex ("pci0000:17"), which the real plugin resolves from
	// sysfs (/sys/bus/pci/devices/<busID> -> ../../../devices/<root>/.../<busID>).  Optional:
	// without it the attribute is left out, as upstream does when sysfs can't resolve it.
	PCIeRoot    string `json:"pcieRoot,omitempty"`
	MemoryBytes uint64 `json:"memoryBytes"`
	// AddressingMode is "HMM" or "ATS" on coherent-memory platforms (Grace Hopper/Blackwell);
	// empty (the default, as on an H100 PCIe/SXM host) means not supported and unpublished.
	AddressingMode string `json:"addressingMode,omitempty"`
	// Health is what the NVML event monitor has seen on this GPU since the plugin started;
	// nil (the default) is a healthy GPU.
	Health *Health `json:"health,omitempty"`
	// MIG is the GPU's MIG profiles (see mig.go); nil: no MIG.
	MIG *MIG `json:"mig,omitempty"`
}

// Health is one GPU's health events, the two NVML reports that make the NVIDIA driver taint
// a device (its health monitor: nvmlEventTypeXidCriticalError and NVML_ERROR_GPU_IS_LOST).
type Health struct {
	// Xid is a critical XID error code the GPU raised (e.g. 79, "GPU has fallen off the bus").
	Xid int `json:"xid,omitempty"`
	// Lost is true when NVML answers NVML_ERROR_GPU_IS_LOST for the GPU.
	Lost bool `json:"lost,omitempty"`
}

// ErrNotFound reports a missing nvml.json: the simulated equivalent of a driver root without
// libnvidia-ml.so.1 / a kernel module that is not loaded.
var ErrNotFound = errors.New("simulated NVML data not found")

// Path returns the nvml.json path below root.
func Path(root string) string { return filepath.Join(root, RelPath) }

// Load reads and validates nvml.json below root.  GPUs are returned sorted by PCI bus id, the
// order in which NVML enumerates them.
func Load(root string) (*Data, error) {
	return LoadFile(Path(root))
}

// LoadFile reads and validates one nvml.json file.
func LoadFile(path string) (*Data, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, path)
	}
	if err != nil {
		return nil, err
	}
	var d Data
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sort.SliceStable(d.GPUs, func(i, j int) bool {
		return strings.ToLower(d.GPUs[i].PCIBusID) < strings.ToLower(d.GPUs[j].PCIBusID)
	})
	return &d, nil
}

func (d *Data) validate() error {
	// A node without GPUs may leave the versions empty; with GPUs they are needed.
	if len(d.GPUs) > 0 && d.DriverVersion == "" {
		return errors.New("driverVersion is empty")
	}
	if len(d.GPUs) > 0 && d.CudaDriverVersion == "" {
		return errors.New("cudaDriverVersion is empty")
	}
	seen := map[int]bool{}
	for i, g := range d.GPUs {
		switch {
		case g.Minor < 0 || g.Minor >= NvidiactlMinor:
			return fmt.Errorf("gpus[%d]: minor %d out of range", i, g.Minor)
		case seen[g.Minor]:
			return fmt.Errorf("gpus[%d]: duplicate minor %d", i, g.Minor)
		case !strings.HasPrefix(g.UUID, "GPU-"):
			return fmt.Errorf("gpus[%d]: uuid %q does not start with GPU-", i, g.UUID)
		case g.PCIBusID == "":
			return fmt.Errorf("gpus[%d]: pciBusID is empty", i)
		}
		seen[g.Minor] = true
		if g.MIG != nil {
			if err := g.MIG.validate(g); err != nil {
				return err
			}
		}
	}
	return nil
}

// ByMinor returns the GPU with the given minor number.
func (d *Data) ByMinor(minor int) (GPU, bool) {
	for _, g := range d.GPUs {
		if g.Minor == minor {
			return g, true
		}
	}
	return GPU{}, false
}

// CudaMajorMinor returns the CUDA driver version as "major.minor", the way the NVIDIA plugin
// formats nvmlSystemGetCudaDriverVersion ("%v.%v", v/1000, (v%1000)/10) and nvidia-smi
// prints it.
func (d *Data) CudaMajorMinor() string {
	parts := strings.SplitN(d.CudaDriverVersion, ".", 3)
	major, minor := parts[0], "0"
	if len(parts) > 1 {
		minor = parts[1]
	}
	if n, err := strconv.Atoi(major); err == nil {
		major = strconv.Itoa(n)
	}
	if n, err := strconv.Atoi(minor); err == nil {
		minor = strconv.Itoa(n)
	}
	return major + "." + minor
}

// BusIDLong returns the PCI bus id as NVML's nvmlPciInfo_t.busId and nvidia-smi print it:
// an 8-digit domain and upper-case hex, e.g. "00000000:18:00.0".
func BusIDLong(busID string) string {
	parts := strings.SplitN(busID, ":", 2)
	if len(parts) != 2 {
		return strings.ToUpper(busID)
	}
	domain := parts[0]
	if n, err := strconv.ParseUint(domain, 16, 32); err == nil {
		domain = fmt.Sprintf("%08X", n)
	}
	return domain + ":" + strings.ToUpper(parts[1])
}

// DevMajor and DevMinor decode a Linux dev_t (st_rdev), as glibc's gnu_dev_major/minor.
func DevMajor(dev uint64) int { return int(((dev >> 8) & 0xfff) | ((dev >> 32) & 0xfffff000)) }

// DevMinor: see DevMajor.
func DevMinor(dev uint64) int { return int((dev & 0xff) | ((dev >> 12) & 0xffffff00)) }
