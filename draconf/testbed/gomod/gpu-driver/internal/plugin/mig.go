package plugin

// MIG devices, as upstream publishes and prepares them with the DynamicMIG feature gate
// (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin: mig.go, partitions.go,
// driver.go generateSplitResourceSlices, nvlib.go inspectMigProfilesAndPlacements).
//
// Publishing (KEP-4815 partitionable devices, resource.k8s.io/v1 on Kubernetes 1.35+): for G
// GPUs, G+1 ResourceSlices in the node's pool, since v1 allows Devices and SharedCounters only
// in separate slices.  First one slice of SharedCounters, one CounterSet per MIG-capable GPU
// (gpu-<minor>-counter-set): one counter per capacity dimension at the largest value any profile
// has (multiprocessors, copy-engines, decoders, encoders, jpeg-engines, ofa-engines, memory) and
// one counter memory-slice-<i> of 1 per memory slice.  (v1 allows 8 counter sets per slice;
// upstream puts all in one, the simulation starts a new slice every 8.)  Then one slice per GPU,
// devices sorted by name: the full GPU gpu-<minor>, consuming everything of its counter set, and
// every possible MIG device gpu-<minor>-mig-<profile without dots>-<profile id>-<placement>,
// consuming its profile's capacities and the memory slices of its placement.  A MIG device's
// attributes are the parent's (productName, brand, architecture, versions, pciBusID, pcieRoot)
// with type=mig, profile and parentUUID; its capacities the profile's.
//
// Preparing a MIG device creates it (GPU instance + compute instance; simulated: its UUID is
// derived from parent, profile and placement) and hands the container, through CDI, the
// parent's /dev/nvidia<minor> and the capability nodes of its GPU and compute instance
// (/dev/nvidia-caps/nvidia-cap<minor>, minors as /proc/driver/nvidia-caps/mig-minors numbers
// them), with NVIDIA_VISIBLE_DEVICES=<MIG UUID>.  As NVML would, creation fails when the
// placement's memory slices, or the whole GPU, are already in use by another prepared claim.

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"draconf.local/testbed/gpu-driver/internal/nvmlsim"
)

// MigDeviceType is the `type` attribute of a MIG device (upstream types.go).
const MigDeviceType = "mig"

// FeatureGateDynamicMIG is upstream's feature gate name (pkg/featuregates).
const FeatureGateDynamicMIG = "DynamicMIG"

// MigSpec is one possible MIG device: parent, profile, placement (upstream MigSpec).
type MigSpec struct {
	Parent *GpuInfo
	Slot   nvmlsim.MigSlot
}

// CanonicalName is upstream's MigSpecTuple.ToCanonicalName: gpu-<minor>-mig-<profile without
// dots>-<profile id>-<placement start>, e.g. gpu-0-mig-1g10gb-19-0.
func (m *MigSpec) CanonicalName() string {
	pname := toRFC1123Compliant(strings.ReplaceAll(m.Slot.Profile.Name, ".", ""))
	return fmt.Sprintf("gpu-%d-mig-%s-%d-%d", m.Parent.Minor, pname, m.Slot.Profile.ID, m.Slot.Start)
}

// UUID is the UUID the MIG device has once created.
func (m *MigSpec) UUID() string {
	return nvmlsim.MigUUID(m.Parent.UUID, m.Slot.Profile.ID, m.Slot.Start)
}

// memSlices are the memory slices the placement takes.
func (m *MigSpec) memSlices() []int {
	var out []int
	for i := m.Slot.Start; i < m.Slot.Start+m.Slot.Profile.Size; i++ {
		out = append(out, i)
	}
	return out
}

// Attributes is upstream CommonAttributesMig.
func (m *MigSpec) Attributes() map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	p := m.Parent
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":                  {StringValue: ptr.To(MigDeviceType)},
		"parentUUID":            {StringValue: ptr.To(p.UUID)},
		"profile":               {StringValue: ptr.To(m.Slot.Profile.Name)},
		"productName":           {StringValue: ptr.To(p.ProductName)},
		"brand":                 {StringValue: ptr.To(p.Brand)},
		"architecture":          {StringValue: ptr.To(p.Architecture)},
		"cudaComputeCapability": {VersionValue: ptr.To(p.CudaComputeCapability)},
		"driverVersion":         {VersionValue: ptr.To(p.DriverVersion)},
		"cudaDriverVersion":     {VersionValue: ptr.To(p.CudaDriverVersion)},
	}
	if p.AddressingMode != nil {
		attrs["addressingMode"] = resourceapi.DeviceAttribute{StringValue: p.AddressingMode}
	}
	if p.pciBusIDAttr != nil {
		attrs[p.pciBusIDAttr.Name] = p.pciBusIDAttr.Value
	}
	if p.pcieRootAttr != nil {
		attrs[p.pcieRootAttr.Name] = p.pcieRootAttr.Value
	}
	return attrs
}

func intcap(i int64) resourceapi.DeviceCapacity {
	return resourceapi.DeviceCapacity{Value: *resource.NewQuantity(i, resource.BinarySI)}
}

// profileCapacities is upstream CommonCapacitiesMig (memory in bytes: memorySizeMB is MiB).
func profileCapacities(p nvmlsim.MigProfile) map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	return map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		"multiprocessors": intcap(int64(p.Multiprocessors)),
		"copyEngines":     intcap(int64(p.CopyEngines)),
		"decoders":        intcap(int64(p.Decoders)),
		"encoders":        intcap(int64(p.Encoders)),
		"jpegEngines":     intcap(int64(p.JpegEngines)),
		"ofaEngines":      intcap(int64(p.OfaEngines)),
		"memory":          intcap(int64(p.MemoryMiB) * 1024 * 1024),
	}
}

// Capacities are the profile's.
func (m *MigSpec) Capacities() map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	return profileCapacities(m.Slot.Profile)
}

// GetDevice is upstream MigSpec.PartGetDevice; without counters under the
// mig-counters-ignored fault.
func (m *MigSpec) GetDevice(faults Faults) resourceapi.Device {
	dev := resourceapi.Device{Name: m.CanonicalName(), Attributes: m.Attributes(), Capacity: m.Capacities()}
	if !faults.Has(FaultMigCountersIgnored) {
		dev.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{
			CounterSet: counterSetName(m.Parent),
			Counters:   addMemSliceCounters(capacitiesToCounters(m.Capacities()), m.memSlices()),
		}}
	}
	return dev
}

// counterSetName is upstream GpuInfo.GetSharedCounterSetName: gpu-<minor>-counter-set.
func counterSetName(g *GpuInfo) string {
	return toRFC1123Compliant(g.CanonicalName() + "-counter-set")
}

// migCapable holds what DynamicMIG discovery learnt about one GPU (upstream enriches GpuInfo:
// maxCapacities, memSliceCount).
type migCapable struct {
	specs         []*MigSpec
	maxCapacities map[resourceapi.QualifiedName]resourceapi.DeviceCapacity
	memSlices     int
}

// addMig records the possible MIG devices of gpu (upstream inspectMigProfilesAndPlacements).
func (l *DeviceLib) addMig(gpu *GpuInfo, g nvmlsim.GPU) {
	slots := g.MigSlots()
	if len(slots) == 0 {
		return
	}
	mc := &migCapable{maxCapacities: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}}
	for _, s := range slots {
		mc.specs = append(mc.specs, &MigSpec{Parent: gpu, Slot: s})
		mc.memSlices = max(mc.memSlices, s.Profile.Size)
		for name, c := range profileCapacities(s.Profile) {
			if cur, ok := mc.maxCapacities[name]; !ok || c.Value.Cmp(cur.Value) > 0 {
				mc.maxCapacities[name] = c
			}
		}
	}
	if l.migs == nil {
		l.migs = map[string]*migCapable{}
	}
	l.migs[gpu.CanonicalName()] = mc
}

// MigByName returns the possible MIG device with this canonical name.
func (l *DeviceLib) MigByName(name string) *MigSpec {
	for _, mc := range l.migs {
		for _, s := range mc.specs {
			if s.CanonicalName() == name {
				return s
			}
		}
	}
	return nil
}

// partitionedDevice is upstream GpuInfo.PartGetDevice: a MIG-capable GPU's capacity is the
// largest of every profile's, and it consumes its whole counter set.
func (l *DeviceLib) partitionedDevice(g *GpuInfo) resourceapi.Device {
	dev := g.GetDevice()
	mc := l.migs[g.CanonicalName()]
	if mc == nil {
		return dev
	}
	dev.Capacity = mc.maxCapacities
	dev.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{
		CounterSet: counterSetName(g), Counters: l.fullCounters(g)}}
	return dev
}

func (l *DeviceLib) fullCounters(g *GpuInfo) map[string]resourceapi.Counter {
	mc := l.migs[g.CanonicalName()]
	all := make([]int, mc.memSlices)
	for i := range all {
		all[i] = i
	}
	return addMemSliceCounters(capacitiesToCounters(mc.maxCapacities), all)
}

// mislabelledParent is the wrong parentUUID the mig-parent-mislabelled fault publishes for m:
// for a MIG device of more than one memory slice, the UUID of the next MIG-capable GPU of the
// node (NVML order, wrapping); "" otherwise (the fault is off, a one-slice profile, or the node
// has a single MIG-capable GPU).  Only the published attribute is wrong: the device's name,
// the counters it consumes and what preparing it creates stay those of its real GPU.
//
// Why the multi-slice profiles only: gpu-test4 asks for 1g, 1g, 2g and 3g under
// matchAttribute parentUUID.  Labelled so, every parentUUID value is carried by one GPU's 1g
// devices and by the previous GPU's larger ones, and no single GPU holds all four under one
// label: kube-scheduler, which satisfies the constraint by the published attributes, must then
// spread the claim over two GPUs whichever order it reads the slices in (their names end in a
// random suffix).  A single 1g device stays labelled right.
func (l *DeviceLib) mislabelledParent(m *MigSpec, faults Faults) string {
	if !faults.Has(FaultMigParentMislabelled) || m.Slot.Profile.Size < 2 {
		return ""
	}
	var capable []*GpuInfo
	for _, g := range l.GPUs {
		if l.migs[g.CanonicalName()] != nil {
			capable = append(capable, g)
		}
	}
	for i, g := range capable {
		if g == m.Parent && len(capable) > 1 {
			return capable[(i+1)%len(capable)].UUID
		}
	}
	return ""
}

// maxCounterSetsPerSlice is resource.k8s.io/v1's ResourceSliceMaxCounterSets.
const maxCounterSetsPerSlice = 8

// partitionedResources is upstream generateSplitResourceSlices (see the file comment).
func (l *DeviceLib) partitionedResources(nodeName string, faults Faults) resourceslice.DriverResources {
	var counterSets []resourceapi.CounterSet
	var deviceSlices []resourceslice.Slice
	for _, g := range l.GPUs { // NVML order: by PCI bus id, as upstream sorts them
		var s resourceslice.Slice
		s.Devices = append(s.Devices, l.partitionedDevice(g))
		if mc := l.migs[g.CanonicalName()]; mc != nil {
			counterSets = append(counterSets, resourceapi.CounterSet{Name: counterSetName(g), Counters: l.fullCounters(g)})
			for _, m := range mc.specs {
				dev := m.GetDevice(faults)
				if wrong := l.mislabelledParent(m, faults); wrong != "" {
					dev.Attributes["parentUUID"] = resourceapi.DeviceAttribute{StringValue: ptr.To(wrong)}
				}
				s.Devices = append(s.Devices, dev)
			}
		}
		sort.Slice(s.Devices, func(i, j int) bool { return s.Devices[i].Name < s.Devices[j].Name })
		deviceSlices = append(deviceSlices, s)
	}
	var out []resourceslice.Slice
	for len(counterSets) > 0 {
		n := min(len(counterSets), maxCounterSetsPerSlice)
		out = append(out, resourceslice.Slice{SharedCounters: counterSets[:n]})
		counterSets = counterSets[n:]
	}
	if len(out) == 0 {
		out = append(out, resourceslice.Slice{})
	}
	out = append(out, deviceSlices...)
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{nodeName: {Slices: out}}}
}

// capacitiesToCounters is upstream's: one counter per capacity, named in DNS-label form.
func capacitiesToCounters(m map[resourceapi.QualifiedName]resourceapi.DeviceCapacity) map[string]resourceapi.Counter {
	out := make(map[string]resourceapi.Counter, len(m))
	for name, c := range m {
		out[camelToDNSName(string(name))] = resourceapi.Counter{Value: c.Value}
	}
	return out
}

func addMemSliceCounters(counters map[string]resourceapi.Counter, memSlices []int) map[string]resourceapi.Counter {
	for _, i := range memSlices {
		counters[fmt.Sprintf("memory-slice-%d", i)] = resourceapi.Counter{Value: *resource.NewQuantity(1, resource.BinarySI)}
	}
	return counters
}

var (
	notDNS   = regexp.MustCompile(`[^a-z0-9-.]`)
	camelOne = regexp.MustCompile("([a-z0-9])([A-Z])")
	camelTwo = regexp.MustCompile("([A-Z]+)([A-Z][a-z])")
)

func toRFC1123Compliant(name string) string {
	name = notDNS.ReplaceAllString(strings.ToLower(name), "-")
	return strings.TrimSuffix(strings.Trim(name, "-"), ".")
}

func camelToDNSName(s string) string {
	s = camelOne.ReplaceAllString(s, "$1-$2")
	return toRFC1123Compliant(camelTwo.ReplaceAllString(s, "$1-$2"))
}

// --- preparation --------------------------------------------------------------------------

// hasMig reports whether any result names a MIG device.
func (l *DeviceLib) hasMig(results []resourceapi.DeviceRequestAllocationResult) bool {
	for _, r := range results {
		if l.MigByName(r.Device) != nil {
			return true
		}
	}
	return false
}

// migConflict is NVML refusing to create the GPU instance: another prepared claim holds the
// whole parent GPU or a MIG device whose memory slices overlap (or, for a full GPU, any MIG
// device of it).  The message is upstream's wrapping of NVML_ERROR_INSUFFICIENT_RESOURCES.
func (l *DeviceLib) migConflict(cp *Checkpoint, claimUID, device string) error {
	mine := l.MigByName(device)
	parent := device
	if mine != nil {
		parent = mine.Parent.CanonicalName()
	}
	return cp.heldByOthers(claimUID, func(uid string, d PreparedDevice) error {
		other := l.MigByName(d.DeviceName)
		switch {
		case mine != nil && other == nil && d.DeviceName == parent:
			return fmt.Errorf("error creating MIG device: error creating GPU instance for '%s': Insufficient Resources "+
				"(GPU %s is in use as a full GPU by claim %s)", device, parent, uid)
		case mine != nil && other != nil && other.Parent == mine.Parent &&
			overlaps(mine.memSlices(), other.memSlices()) && other.CanonicalName() != device:
			return fmt.Errorf("error creating MIG device: error creating GPU instance for '%s': Insufficient Resources "+
				"(memory slices in use by %s of claim %s)", device, other.CanonicalName(), uid)
		case mine == nil && other != nil && other.Parent.CanonicalName() == device:
			return fmt.Errorf("requested device %s is in MIG use: %s is prepared for claim %s", device,
				other.CanonicalName(), uid)
		}
		return nil
	})
}

func overlaps(a, b []int) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// prepareMig prepares a claim some of whose devices are MIG devices (full GPUs among them are
// prepared as usual): one CDI device per allocated device.
func (s *DeviceState) prepareMig(claim *resourceapi.ResourceClaim, cp *Checkpoint,
	results []resourceapi.DeviceRequestAllocationResult) ([]kubeletplugin.Device, error) {
	claimUID := string(claim.UID)
	for _, r := range results {
		if s.lib.ByName(r.Device) == nil && s.lib.MigByName(r.Device) == nil {
			return nil, fmt.Errorf("prepare devices failed: allocatable not found for device %q", r.Device)
		}
		if ptr.Deref(r.AdminAccess, false) {
			continue
		}
		if err := s.lib.migConflict(cp, claimUID, r.Device); err != nil {
			return nil, fmt.Errorf("prepare devices failed: %w", err)
		}
	}
	if err := validateNoOverlappingPreparedDevices(cp, claimUID, results); err != nil {
		return nil, fmt.Errorf("unable to prepare claim %v: %w", claimUID, err)
	}
	if err := s.checkpoint.update(func(cp *Checkpoint) {
		cp.PreparedClaims[claimUID] = PreparedClaim{CheckpointState: ClaimCheckpointStatePrepareStarted,
			Namespace: claim.Namespace, Name: claim.Name}
	}); err != nil {
		return nil, fmt.Errorf("unable to update checkpoint: %w", err)
	}
	var devices []PreparedDevice
	var names []string
	for _, r := range results {
		d := PreparedDevice{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			UUID: s.lib.deviceUUID(r.Device), AdminAccess: ptr.Deref(r.AdminAccess, false)}
		if !s.cfg.Faults.Has(FaultCDINotInjected) {
			d.CDIDeviceIDs = []string{cdiparser.QualifiedName(cdiVendor, cdiClaimClass, claimUID+"-"+r.Device)}
			names = append(names, r.Device)
		}
		devices = append(devices, d)
	}
	if err := s.writeMigSpec(claimUID, names); err != nil {
		return nil, err
	}
	if err := s.checkpoint.update(func(cp *Checkpoint) {
		cp.PreparedClaims[claimUID] = PreparedClaim{CheckpointState: ClaimCheckpointStatePrepareCompleted,
			Namespace: claim.Namespace, Name: claim.Name, PreparedDevices: devices}
	}); err != nil {
		return nil, fmt.Errorf("unable to update checkpoint: %w", err)
	}
	return toKubeletDevices(devices), nil
}

// deviceUUID is the UUID of a whole GPU or (once created) of a MIG device, by device name.
func (l *DeviceLib) deviceUUID(name string) string {
	if m := l.MigByName(name); m != nil {
		return m.UUID()
	}
	if g := l.ByName(name); g != nil {
		return g.UUID
	}
	return ""
}

// writeMigSpec writes the claim's CDI spec for these devices (whole GPUs or MIG devices, each
// once): per device its nodes, common to the claim /dev/nvidiactl, NVIDIA_VISIBLE_DEVICES and
// the nvidia-smi mounts.  No devices: no spec.
func (s *DeviceState) writeMigSpec(claimUID string, names []string) error {
	spec := &cdispec.Spec{Kind: cdiKind}
	var uuids []string
	seen := map[string]bool{}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		var nodes []*cdispec.DeviceNode
		if m := s.lib.MigByName(name); m != nil {
			gi := m.Slot.GI
			parent, err := s.cdi.deviceNode(fmt.Sprintf("nvidia%d", m.Parent.Minor), nvmlsim.NvidiaMajor, m.Parent.Minor, true)
			if err != nil {
				return fmt.Errorf("unable to create CDI spec file for claim: %w", err)
			}
			nodes = append(nodes, parent)
			for _, minor := range []int{nvmlsim.GIAccessMinor(m.Parent.Minor, gi), nvmlsim.CIAccessMinor(m.Parent.Minor, gi, 0)} {
				capNode, err := s.cdi.deviceNode(fmt.Sprintf("nvidia-caps/nvidia-cap%d", minor), nvmlsim.NvidiaCapsMajor, minor, true)
				if err != nil {
					return fmt.Errorf("unable to create CDI spec file for claim: %w", err)
				}
				nodes = append(nodes, capNode)
			}
			klog.Infof("Created MIG device %s (%s) on %s: GPU instance %d, compute instance 0", name, m.UUID(), m.Parent, gi)
		} else {
			g := s.lib.ByName(name)
			if g == nil {
				return fmt.Errorf("unable to create CDI spec file for claim: no device %q", name)
			}
			node, err := s.cdi.deviceNode(fmt.Sprintf("nvidia%d", g.Minor), nvmlsim.NvidiaMajor, g.Minor, true)
			if err != nil {
				return fmt.Errorf("unable to create CDI spec file for claim: %w", err)
			}
			nodes = append(nodes, node)
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: claimUID + "-" + name,
			ContainerEdits: cdispec.ContainerEdits{DeviceNodes: nodes}})
		uuids = append(uuids, s.lib.deviceUUID(name))
	}
	if len(spec.Devices) == 0 {
		return nil
	}
	common, err := s.cdi.commonEdits(uuids)
	if err != nil {
		return fmt.Errorf("unable to create CDI spec file for claim: failed to get common CDI spec edits: %w", err)
	}
	spec.ContainerEdits = *common
	version, err := cdiapi.MinimumRequiredVersion(spec)
	if err != nil {
		return fmt.Errorf("unable to create CDI spec file for claim: %w", err)
	}
	spec.Version = version
	if err := s.cdi.WriteClaimSpec(claimUID, spec); err != nil {
		return fmt.Errorf("unable to create CDI spec file for claim: %w", err)
	}
	return nil
}

// ensureMigSpec rewrites a prepared claim's CDI spec on a DynamicMIG node if it went missing
// (the counterpart of ensureSpec for whole GPUs).
func (s *DeviceState) ensureMigSpec(claimUID string, pc PreparedClaim) error {
	if _, err := os.Stat(s.cdi.SpecPath(claimUID)); err == nil {
		return nil
	}
	var names []string
	for _, d := range pc.PreparedDevices {
		if len(d.CDIDeviceIDs) > 0 {
			names = append(names, d.DeviceName)
		}
	}
	if len(names) > 0 {
		klog.Warningf("CDI spec of prepared claim %s is missing: writing it again", claimUID)
	}
	return s.writeMigSpec(claimUID, names)
}
