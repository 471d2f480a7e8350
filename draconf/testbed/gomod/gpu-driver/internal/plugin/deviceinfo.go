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

// GpuInfo is one full, physical GPU: what the real plugin learns of it from NVML and publishes
// (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 cmd/gpu-kubelet-plugin deviceinfo.go, nvlib.go),
// here read from the simulated NVML data.
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

// CanonicalName is the device name in the ResourceSlice, gpu-<minor>, as the real plugin
// names a full GPU.
func (d *GpuInfo) CanonicalName() string {
	return "gpu-" + strconv.Itoa(d.Minor)
}

// String names the GPU in logs: its device name and UUID.
func (d *GpuInfo) String() string {
	return d.CanonicalName() + " (" + d.UUID + ")"
}

// Attributes are the attributes the real plugin publishes for a full GPU (v0.4.1): type and
// uuid, and those its MIG devices share with it (hardwareAttributes).
func (d *GpuInfo) Attributes() map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs := d.hardwareAttributes()
	attrs["type"] = resourceapi.DeviceAttribute{StringValue: ptr.To(GpuDeviceType)}
	attrs["uuid"] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.UUID)}
	return attrs
}

// hardwareAttributes describe the GPU, and so each MIG device of it: productName, brand and
// architecture as strings; cudaComputeCapability, driverVersion and cudaDriverVersion as
// versions (strict semver); the standard resource.kubernetes.io/pciBusID and pcieRoot where
// known; addressingMode only where the platform has one.
func (d *GpuInfo) hardwareAttributes() map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for name, v := range map[resourceapi.QualifiedName]string{
		"productName": d.ProductName, "brand": d.Brand, "architecture": d.Architecture} {
		attrs[name] = resourceapi.DeviceAttribute{StringValue: ptr.To(v)}
	}
	for name, v := range map[resourceapi.QualifiedName]string{"cudaComputeCapability": d.CudaComputeCapability,
		"driverVersion": d.DriverVersion, "cudaDriverVersion": d.CudaDriverVersion} {
		attrs[name] = resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
	}
	for _, standard := range []*deviceattribute.DeviceAttribute{d.pciBusIDAttr, d.pcieRootAttr} {
		if standard != nil {
			attrs[standard.Name] = standard.Value
		}
	}
	if d.AddressingMode != nil {
		attrs["addressingMode"] = resourceapi.DeviceAttribute{StringValue: ptr.To(*d.AddressingMode)}
	}
	return attrs
}

// fullGpuCapacity is a full GPU's one capacity, `memory`, in bytes (as the real plugin
// publishes it without DynamicMIG).
func (d *GpuInfo) fullGpuCapacity() map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	if d.MemoryBytes == nil {
		return nil
	}
	return map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		"memory": {Value: *resource.NewQuantity(int64(*d.MemoryBytes), resource.BinarySI)},
	}
}

// GetDevice is the ResourceSlice entry of this GPU.
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

// DeviceLib is the GPUs NVML reports on this node, in NVML (PCI bus id) order: what the real
// plugin's device library (nvlib.go) enumerates.
type DeviceLib struct {
	containerDriverRoot string
	nvidiaSMIPath       string
	GPUs                []*GpuInfo
	// dynamicMIG is the DynamicMIG feature gate; migs the MIG-capable GPUs' possible MIG
	// devices, by GPU name (see mig.go).
	dynamicMIG bool
	migs       map[string]*migCapable
}

// NewDeviceLib finds the driver in the container driver root (its NVML library and
// nvidia-smi, which the real plugin looks for there too) and enumerates the GPUs, as the real
// plugin does with DynamicMIG and passthrough off (the chart's defaults).  Under the
// no-devices fault NVML starts and reports no GPU, as the real one started to allow zero GPUs.
func NewDeviceLib(containerDriverRoot string, faults Faults) (*DeviceLib, error) {
	// The real library is libnvidia-ml.so.1; the simulated one is nvml.json.
	if _, err := os.Stat(nvmlsim.Path(containerDriverRoot)); err != nil {
		return nil, fmt.Errorf("no NVIDIA driver in driver root %s: its NVML library %s is missing: %w",
			containerDriverRoot, nvmlsim.RelPath, err)
	}
	smi, err := findFile(containerDriverRoot, "nvidia-smi", "/opt/bin", "/usr/bin", "/usr/sbin", "/bin", "/sbin")
	if err != nil {
		return nil, fmt.Errorf("no nvidia-smi in driver root %s: %w", containerDriverRoot, err)
	}
	l := &DeviceLib{containerDriverRoot: containerDriverRoot, nvidiaSMIPath: smi}

	klog.Infof("Enumerating the GPUs NVML reports (driver root %s)", containerDriverRoot)
	data, err := nvmlsim.Load(containerDriverRoot)
	if err != nil {
		return nil, fmt.Errorf("NVML did not start: %w", err)
	}
	if faults.Has(FaultNoDevices) {
		klog.Warningf("simulated fault %s: NVML reports no GPU on this node", FaultNoDevices)
		return l, nil
	}
	seen := time.Now()
	for i, g := range data.GPUs {
		info, err := gpuInfo(i, g, data)
		if err != nil {
			return nil, fmt.Errorf("NVML's GPU %d: %w", i, err)
		}
		if info.taints = healthTaints(g.Health, seen); info.taints != nil {
			klog.Warningf("GPU %s is unhealthy: tainting it %v", info, info.taints)
		}
		l.GPUs = append(l.GPUs, info)
		l.addMig(info, g)
	}
	return l, nil
}

// gpuInfo is what the real plugin reads of one GPU from NVML, read from the simulated data.
func gpuInfo(index int, g nvmlsim.GPU, data *nvmlsim.Data) (*GpuInfo, error) {
	versions := map[string]string{"cudaComputeCapability": g.CudaComputeCapability,
		"driverVersion": data.DriverVersion, "cudaDriverVersion": data.CudaMajorMinor()}
	for name, v := range versions {
		strict, err := normalizeVersion(v)
		if err != nil {
			return nil, fmt.Errorf("%s of GPU %d: %w", name, index, err)
		}
		versions[name] = strict
	}
	// NVML gives the bus ID with a 4-digit domain; the attribute wants it in lower case.
	busID := strings.ToLower(g.PCIBusID)
	busAttr, err := deviceattribute.GetPCIBusIDAttribute(busID)
	if err != nil {
		return nil, fmt.Errorf("PCI bus ID of GPU %d: %w", index, err)
	}
	info := &GpuInfo{
		UUID:                  g.UUID,
		Minor:                 g.Minor,
		ProductName:           g.ProductName,
		Brand:                 g.Brand,
		Architecture:          g.Architecture,
		CudaComputeCapability: versions["cudaComputeCapability"],
		DriverVersion:         versions["driverVersion"],
		CudaDriverVersion:     versions["cudaDriverVersion"],
		PCIBusID:              busID,
		pciBusIDAttr:          &busAttr,
	}
	if g.MemoryBytes > 0 {
		info.MemoryBytes = ptr.To(g.MemoryBytes)
	}
	if g.AddressingMode != "" {
		info.AddressingMode = ptr.To(g.AddressingMode)
	}
	// The root complex comes from sysfs, as for the real plugin (the same deviceattribute
	// call); here sysfs is a simulated one built from nvml.json.
	if attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID,
		deviceattribute.WithFS(simSysfs{pcieRoot: g.PCIeRoot})); err == nil {
		info.pcieRootAttr = &attr
	} else {
		klog.Warningf("GPU %d: published without pcieRoot, sysfs does not resolve it: %v", index, err)
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

// DriverResources is what the real plugin publishes without DynamicMIG: one pool named after
// the node, with one slice holding every device (in NVML's order here, so the slice is the
// same every time).  With zero GPUs the pool still has its one, empty, slice.
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
		klog.V(4).Infof("Publishing device %s", dev.Name)
		slice.Devices = append(slice.Devices, dev)
	}
	return resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{nodeName: {Slices: []resourceslice.Slice{slice}}},
	}
}

// findFile is the first of root/name and root/<dir>/name (dirs in order) that resolves,
// symlinks followed.
func findFile(root, name string, dirs ...string) (string, error) {
	tried := make([]string, 0, len(dirs)+1)
	for _, d := range append([]string{""}, dirs...) {
		p := filepath.Join(root, d, name)
		if found, err := filepath.EvalSymlinks(p); err == nil {
			return found, nil
		}
		tried = append(tried, p)
	}
	return "", fmt.Errorf("%s is none of %v", name, tried)
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
