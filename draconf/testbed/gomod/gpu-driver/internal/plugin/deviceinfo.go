package plugin

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"draconf.local/testbed/gpu-driver/internal/nvmlsim"
)

// GpuInfo is one full, physical GPU, as upstream's GpuInfo
// (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 cmd/gpu-kubelet-plugin/deviceinfo.go),
// filled from the simulated NVML data the way upstream's getGpuInfo (nvlib.go) fills it.
type GpuInfo struct {
	UUID                  string  `json:"uuid"`
	Minor                 int     `json:"minor"`
	MemoryBytes           *uint64 `json:"-"`
	ProductName           string  `json:"-"`
	Brand                 string  `json:"-"`
	Architecture          string  `json:"-"`
	CudaComputeCapability string  `json:"-"`
	DriverVersion         string  `json:"-"`
	CudaDriverVersion     string  `json:"-"`
	PCIBusID              string  `json:"pciBusID"`
	AddressingMode        *string `json:"-"`
	// taints are the device taints the health monitor put on this GPU (see healthTaints).
	taints []resourceapi.DeviceTaint

	pciBusIDAttr *deviceattribute.DeviceAttribute
	pcieRootAttr *deviceattribute.DeviceAttribute
}

// CanonicalName is the device name in the ResourceSlice: gpu-<minor> (upstream
// deviceinfo.go GpuInfo.CanonicalName).
func (d *GpuInfo) CanonicalName() string {
	return fmt.Sprintf("gpu-%d", d.Minor)
}

// String gives the minor for recognisability and the UUID for precision (upstream).
func (d *GpuInfo) String() string {
	return fmt.Sprintf("%s-%s", d.CanonicalName(), d.UUID)
}

// Attributes is upstream's GpuInfo.Attributes() (v0.4.1 deviceinfo.go): strings for type,
// uuid, productName, brand, architecture; versions (strict semver) for
// cudaComputeCapability, driverVersion, cudaDriverVersion; the standard
// resource.kubernetes.io/pciBusID and resource.kubernetes.io/pcieRoot strings; and
// addressingMode only where the platform supports one.
func (d *GpuInfo) Attributes() map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":                  {StringValue: ptr.To(GpuDeviceType)},
		"uuid":                  {StringValue: ptr.To(d.UUID)},
		"productName":           {StringValue: ptr.To(d.ProductName)},
		"brand":                 {StringValue: ptr.To(d.Brand)},
		"architecture":          {StringValue: ptr.To(d.Architecture)},
		"cudaComputeCapability": {VersionValue: ptr.To(d.CudaComputeCapability)},
		"driverVersion":         {VersionValue: ptr.To(d.DriverVersion)},
		"cudaDriverVersion":     {VersionValue: ptr.To(d.CudaDriverVersion)},
	}
	if d.pciBusIDAttr != nil {
		attrs[d.pciBusIDAttr.Name] = d.pciBusIDAttr.Value
	}
	if d.pcieRootAttr != nil {
		attrs[d.pcieRootAttr.Name] = d.pcieRootAttr.Value
	}
	if d.AddressingMode != nil {
		attrs["addressingMode"] = resourceapi.DeviceAttribute{StringValue: d.AddressingMode}
	}
	return attrs
}

// fullGpuCapacity is upstream's partitions.go fullGpuCapacity: just `memory`, in bytes.
func (d *GpuInfo) fullGpuCapacity() map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	if d.MemoryBytes == nil {
		return nil
	}
	return map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		"memory": {Value: *resource.NewQuantity(int64(*d.MemoryBytes), resource.BinarySI)},
	}
}

// GetDevice is the ResourceSlice entry of this GPU (upstream GpuInfo.GetDevice).
func (d *GpuInfo) GetDevice() resourceapi.Device {
	return resourceapi.Device{
		Name:       d.CanonicalName(),
		Attributes: d.Attributes(),
		Capacity:   d.fullGpuCapacity(),
		Taints:     d.taints,
	}
}

// Taint keys of the NVIDIA driver's health monitor (kubernetes-sigs/dra-driver-nvidia-gpu
// PR #983 "Add taints on health events", design in issue #905; documented in its
// site/content/docs/guides/gpu-health-checking.md): a fatal XID taints the device
// gpu.nvidia.com/xid=<code>:NoSchedule, a lost GPU gpu.nvidia.com/gpu-lost:NoSchedule
// (non-fatal XIDs and unmonitored devices get effect None, which the bed does not simulate).
const (
	TaintKeyXid     = DriverName + "/xid"
	TaintKeyGpuLost = DriverName + "/gpu-lost"
)

// healthTaints are the taints a GPU with these health events carries, stamped with when the
// monitor saw them (whole seconds, as the API stores them, so republishing changes nothing).
func healthTaints(h *nvmlsim.Health, seen time.Time) []resourceapi.DeviceTaint {
	if h == nil {
		return nil
	}
	added := metav1.NewTime(seen.Truncate(time.Second))
	var taints []resourceapi.DeviceTaint
	if h.Xid != 0 {
		taints = append(taints, resourceapi.DeviceTaint{Key: TaintKeyXid, Value: strconv.Itoa(h.Xid),
			Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &added})
	}
	if h.Lost {
		taints = append(taints, resourceapi.DeviceTaint{Key: TaintKeyGpuLost,
			Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &added})
	}
	return taints
}

// DeviceLib is the simulated counterpart of upstream's deviceLib (nvlib.go): the GPUs NVML
// reports on this node, in NVML (PCI bus id) order.
type DeviceLib struct {
	containerDriverRoot string
	nvidiaSMIPath       string
	GPUs                []*GpuInfo
	// dynamicMIG is the DynamicMIG feature gate; migs the MIG-capable GPUs' possible MIG
	// devices, by GPU name (see mig.go).
	dynamicMIG bool
	migs       map[string]*migCapable
}

// NewDeviceLib locates the driver in the container driver root and enumerates the GPUs, as
// upstream's newDeviceLib + enumerateAllPossibleDevices (DynamicMIG and passthrough off, the
// chart defaults).  With the no-devices fault NVML initialises (INIT_FLAG_NO_GPUS, as
// upstream does) and finds no GPU.
func NewDeviceLib(containerDriverRoot string, faults Faults) (*DeviceLib, error) {
	// Upstream root.go getDriverLibraryPath looks for libnvidia-ml.so.1; the simulated NVML
	// library is nvml.json.
	if _, err := os.Stat(nvmlsim.Path(containerDriverRoot)); err != nil {
		return nil, fmt.Errorf("failed to locate driver libraries: error locating %q: %w",
			nvmlsim.RelPath, err)
	}
	smi, err := findFile(containerDriverRoot, "nvidia-smi", "/opt/bin", "/usr/bin", "/usr/sbin", "/bin", "/sbin")
	if err != nil {
		return nil, fmt.Errorf("failed to locate nvidia-smi: %w", err)
	}
	l := &DeviceLib{containerDriverRoot: containerDriverRoot, nvidiaSMIPath: smi}

	klog.Infof("Traverse GPU devices")
	data, err := nvmlsim.Load(containerDriverRoot)
	if err != nil {
		return nil, fmt.Errorf("error enumerating all possible devices: error enumerating allocatable devices: ensureNVML failed: %w", err)
	}
	if faults.Has(FaultNoDevices) {
		klog.Warningf("simulated fault %s: NVML reports no GPU on this node", FaultNoDevices)
		return l, nil
	}
	seen := time.Now()
	for i, g := range data.GPUs {
		info, err := gpuInfo(i, g, data)
		if err != nil {
			return nil, fmt.Errorf("error enumerating all possible devices: error enumerating allocatable devices: error getting info for GPU %d: %w", i, err)
		}
		if info.taints = healthTaints(g.Health, seen); info.taints != nil {
			klog.Warningf("GPU %s is unhealthy: tainting it %v", info, info.taints)
		}
		l.GPUs = append(l.GPUs, info)
		l.addMig(info, g)
	}
	return l, nil
}

// gpuInfo mirrors upstream nvlib.go getGpuInfo for one simulated GPU.
func gpuInfo(index int, g nvmlsim.GPU, data *nvmlsim.Data) (*GpuInfo, error) {
	cc, err := normalizeVersion(g.CudaComputeCapability)
	if err != nil {
		return nil, fmt.Errorf("error getting CUDA compute capability for device %d: %w", index, err)
	}
	driver, err := normalizeVersion(data.DriverVersion)
	if err != nil {
		return nil, fmt.Errorf("error getting driver version: %w", err)
	}
	cuda, err := normalizeVersion(data.CudaMajorMinor())
	if err != nil {
		return nil, fmt.Errorf("error getting CUDA driver version: %w", err)
	}
	// go-nvlib's GetPCIBusID returns the 4-digit-domain, lower-case form.
	busID := strings.ToLower(g.PCIBusID)
	busAttr, err := deviceattribute.GetPCIBusIDAttribute(busID)
	if err != nil {
		return nil, fmt.Errorf("error getting PCI bus ID for device %d: %w", index, err)
	}
	info := &GpuInfo{
		UUID:                  g.UUID,
		Minor:                 g.Minor,
		ProductName:           g.ProductName,
		Brand:                 g.Brand,
		Architecture:          g.Architecture,
		CudaComputeCapability: cc,
		DriverVersion:         driver,
		CudaDriverVersion:     cuda,
		PCIBusID:              busID,
		pciBusIDAttr:          &busAttr,
	}
	if g.MemoryBytes > 0 {
		info.MemoryBytes = ptr.To(g.MemoryBytes)
	}
	if g.AddressingMode != "" {
		info.AddressingMode = ptr.To(g.AddressingMode)
	}
	// Upstream resolves the root complex from sysfs with this very call; here sysfs is the
	// simulated one built from nvml.json.
	if attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID,
		deviceattribute.WithFS(simSysfs{pcieRoot: g.PCIeRoot})); err == nil {
		info.pcieRootAttr = &attr
	} else {
		klog.Warningf("error getting PCIe root for device %d, continuing without attribute: %v", index, err)
	}
	return info, nil
}

// ByName returns the GPU with the given canonical device name.
func (l *DeviceLib) ByName(name string) *GpuInfo {
	for _, g := range l.GPUs {
		if g.CanonicalName() == name {
			return g
		}
	}
	return nil
}

// DriverResources is what upstream's publishResources publishes without DynamicMIG: one pool
// named after the node with one slice holding every device (upstream iterates a map; here
// the order is NVML's, which makes the slice reproducible).  With zero GPUs the pool still
// has its one, empty, slice.
func (l *DeviceLib) DriverResources(nodeName string, faults Faults) resourceslice.DriverResources {
	if l.dynamicMIG {
		return l.partitionedResources(nodeName, faults)
	}
	var slice resourceslice.Slice
	for _, g := range l.GPUs {
		dev := g.GetDevice()
		if faults.Has(FaultAttributeDrift) {
			delete(dev.Attributes, "productName")
		}
		klog.V(4).Infof("About to announce device %s", dev.Name)
		slice.Devices = append(slice.Devices, dev)
	}
	return resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{nodeName: {Slices: []resourceslice.Slice{slice}}},
	}
}

// findFile is upstream root.go findFile: the file in the root or one of the given folders,
// with symlinks resolved.
func findFile(root, name string, searchIn ...string) (string, error) {
	for _, d := range append([]string{"/"}, searchIn...) {
		candidate, err := filepath.EvalSymlinks(filepath.Join(root, d, name))
		if err == nil {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("error locating %q", name)
}

// simSysfs is a one-entry sysfs for deviceattribute.GetPCIeRootAttributeByPCIBusID:
// bus/pci/devices/<busID> links to ../../../devices/<pcieRoot>/<busID>, as on a real host
// (intermediate bridges omitted).
type simSysfs struct {
	pcieRoot string // empty: no link, as for a device sysfs doesn't know
}

func (s simSysfs) link(name string) (string, bool) {
	if s.pcieRoot == "" || path.Dir(name) != "bus/pci/devices" {
		return "", false
	}
	return "../../../devices/" + s.pcieRoot + "/" + path.Base(name), true
}

func (s simSysfs) Open(name string) (fs.File, error) {
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

func (s simSysfs) ReadLink(name string) (string, error) {
	if target, ok := s.link(name); ok {
		return target, nil
	}
	return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrNotExist}
}

func (s simSysfs) Lstat(name string) (fs.FileInfo, error) {
	if _, ok := s.link(name); ok {
		return symlinkInfo(path.Base(name)), nil
	}
	return nil, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrNotExist}
}

type symlinkInfo string

func (s symlinkInfo) Name() string       { return string(s) }
func (s symlinkInfo) Size() int64        { return 0 }
func (s symlinkInfo) Mode() fs.FileMode  { return fs.ModeSymlink | 0o777 }
func (s symlinkInfo) ModTime() time.Time { return time.Time{} }
func (s symlinkInfo) IsDir() bool        { return false }
func (s symlinkInfo) Sys() any           { return nil }

var _ fs.ReadLinkFS = simSysfs{}
