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
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

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

// MigDeviceType is the `type` attribute of a MIG device.
const MigDeviceType = "mig"

// FeatureGateDynamicMIG is the real driver's feature gate for MIG devices made on demand.
const FeatureGateDynamicMIG = "DynamicMIG"

// MigSpec is one possible MIG device: parent, profile, placement.
type MigSpec struct {
	Parent *GpuInfo
	Slot   nvmlsim.MigSlot
}

// CanonicalName is the device name the real plugin publishes a MIG device under:
// gpu-<minor>-mig-<profile without dots>-<profile id>-<placement start>, e.g.
// gpu-0-mig-1g10gb-19-0 (a profile's "+me" becomes "-me").
func (m *MigSpec) CanonicalName() string {
	profile := dnsName(strings.ReplaceAll(m.Slot.Profile.Name, ".", ""))
	return fmt.Sprintf("%s-mig-%s-%d-%d", m.Parent.CanonicalName(), profile, m.Slot.Profile.ID, m.Slot.Start)
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

// Attributes are the parent GPU's hardware attributes, with type mig, the MIG device's
// profile and its parent's UUID (no uuid of its own: it has none before it is created).
func (m *MigSpec) Attributes() map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs := m.Parent.hardwareAttributes()
	attrs["type"] = resourceapi.DeviceAttribute{StringValue: ptr.To(MigDeviceType)}
	attrs["parentUUID"] = resourceapi.DeviceAttribute{StringValue: ptr.To(m.Parent.UUID)}
	attrs["profile"] = resourceapi.DeviceAttribute{StringValue: ptr.To(m.Slot.Profile.Name)}
	return attrs
}

// profileCapacities are the capacities the real plugin publishes for a MIG profile: its
// engine counts, and its memory in bytes (NVML gives MiB).
func profileCapacities(p nvmlsim.MigProfile) map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	counts := map[resourceapi.QualifiedName]int64{
		"multiprocessors": int64(p.Multiprocessors),
		"copyEngines":     int64(p.CopyEngines),
		"decoders":        int64(p.Decoders),
		"encoders":        int64(p.Encoders),
		"jpegEngines":     int64(p.JpegEngines),
		"ofaEngines":      int64(p.OfaEngines),
		"memory":          int64(p.MemoryMiB) << 20,
	}
	out := make(map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, len(counts))
	for name, n := range counts {
		out[name] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(n, resource.BinarySI)}
	}
	return out
}

// Capacities are the profile's.
func (m *MigSpec) Capacities() map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	return profileCapacities(m.Slot.Profile)
}

// GetDevice is the MIG device's ResourceSlice entry: it consumes its capacities and memory
// slices from its parent's counter set (nothing under the mig-counters-ignored fault).
func (m *MigSpec) GetDevice(faults Faults) resourceapi.Device {
	dev := resourceapi.Device{Name: m.CanonicalName(), Attributes: m.Attributes(), Capacity: m.Capacities()}
	if !faults.Has(FaultMigCountersIgnored) {
		dev.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{
			CounterSet: counterSetName(m.Parent),
			Counters:   counters(m.Capacities(), m.memSlices()),
		}}
	}
	return dev
}

// counterSetName names a GPU's counter set as the real plugin does: gpu-<minor>-counter-set.
func counterSetName(g *GpuInfo) string {
	return g.CanonicalName() + "-counter-set"
}

// migCapable is what DynamicMIG discovery learnt about one GPU: its possible MIG devices,
// the largest of each capacity over them, and its number of memory slices.
type migCapable struct {
	specs         []*MigSpec
	maxCapacities map[resourceapi.QualifiedName]resourceapi.DeviceCapacity
	memSlices     int
}

// addMig records the possible MIG devices of gpu, every profile at every placement NVML
// offers (what the real plugin's discovery walks: nvlib.go inspectMigProfilesAndPlacements).
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

// partitionedDevice is a MIG-capable GPU's own entry: its capacities are the largest of its
// profiles', and it consumes its whole counter set.
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
	return counters(mc.maxCapacities, all)
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

// partitionedResources is the node's pool under DynamicMIG (see the file comment).
func (l *DeviceLib) partitionedResources(nodeName string, faults Faults) resourceslice.DriverResources {
	var counterSets []resourceapi.CounterSet
	var deviceSlices []resourceslice.Slice
	for _, g := range l.GPUs { // NVML order: by PCI bus id
		var s resourceslice.Slice
		s.Devices = append(s.Devices, l.partitionedDevice(g))
		if mc := l.migs[g.CanonicalName()]; mc != nil {
			counterSets = append(counterSets, resourceapi.CounterSet{Name: counterSetName(g), Counters: l.fullCounters(g)})
			for _, m := range mc.specs {
				if faults.Has(FaultMigUnpublished) {
					break // the whole GPU, with its counter set, and none of its parts
				}
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

// counters are what a device consumes of, or a counter set holds for, these capacities and
// memory slices: a counter per capacity, of its value, named as the real plugin names them
// (the capacity's name split at its capitals: copyEngines is copy-engines), and a counter
// memory-slice-<i> of 1 per memory slice.
func counters(caps map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, memSlices []int) map[string]resourceapi.Counter {
	out := make(map[string]resourceapi.Counter, len(caps)+len(memSlices))
	for name, c := range caps {
		out[dnsName(splitCamel(string(name)))] = resourceapi.Counter{Value: c.Value}
	}
	for _, i := range memSlices {
		out["memory-slice-"+strconv.Itoa(i)] = resourceapi.Counter{Value: *resource.NewQuantity(1, resource.BinarySI)}
	}
	return out
}

// splitCamel puts a '-' before each capital that starts a word: one after a small letter or a
// digit, or the last of a run of capitals when a small letter follows (jpegEngines:
// jpeg-Engines, HTTPServer: HTTP-Server).
func splitCamel(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) {
			prev := r[i-1]
			endsRun := unicode.IsUpper(prev) && i+1 < len(r) && unicode.IsLower(r[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || endsRun {
				b.WriteByte('-')
			}
		}
		b.WriteRune(c)
	}
	return b.String()
}

// dnsName makes s fit a DNS name: lower case, any other character than a-z, 0-9, '-' and
// '.' turned into '-', with no '-' at either end and no '.' at the end.
func dnsName(s string) string {
	out := []rune(strings.ToLower(s))
	for i, c := range out {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			out[i] = '-'
		}
	}
	return strings.TrimSuffix(strings.Trim(string(out), "-"), ".")
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
// device of it).  "Insufficient Resources" is NVML's name for that error.
func (l *DeviceLib) migConflict(ledger *ledger, claimUID, device string) error {
	mine := l.MigByName(device)
	parent := device
	if mine != nil {
		parent = mine.Parent.CanonicalName()
	}
	return ledger.heldByOthers(claimUID, func(uid string, d heldDevice) error {
		other := l.MigByName(d.DeviceName)
		switch {
		case mine != nil && other == nil && d.DeviceName == parent:
			return fmt.Errorf("MIG device %s not created: NVML: Insufficient Resources "+
				"(GPU %s is prepared whole for claim %s)", device, parent, uid)
		case mine != nil && other != nil && other.Parent == mine.Parent &&
			overlaps(mine.memSlices(), other.memSlices()) && other.CanonicalName() != device:
			return fmt.Errorf("MIG device %s not created: NVML: Insufficient Resources "+
				"(its memory slices are %s's, prepared for claim %s)", device, other.CanonicalName(), uid)
		case mine == nil && other != nil && other.Parent.CanonicalName() == device:
			return fmt.Errorf("GPU %s is in MIG use: its MIG device %s is prepared for claim %s", device,
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

// prepareMig prepares a claim on a DynamicMIG node, where some of its devices may be MIG
// devices (its full GPUs are prepared there too): one CDI device per allocated device.  A MIG
// device is created (simulated) when its claim is prepared, so NVML's refusals come first.
func (p *Preparer) prepareMig(claim *resourceapi.ResourceClaim, l *ledger,
	results []resourceapi.DeviceRequestAllocationResult) ([]kubeletplugin.Device, error) {
	claimUID := string(claim.UID)
	for _, r := range results {
		if ptr.Deref(r.AdminAccess, false) {
			continue
		}
		if err := p.lib.migConflict(l, claimUID, r.Device); err != nil {
			return nil, err
		}
	}
	if err := refuseHeld(l, claimUID, results); err != nil {
		return nil, err
	}
	if err := p.enter(claim, stagePreparing, nil); err != nil {
		return nil, err
	}
	// A whole GPU of a DynamicMIG node takes the same GpuConfig sharing as anywhere else: a
	// time slice or an MPS daemon is the GPU's, whether or not it could also be partitioned.
	shared := map[string]SharingState{}
	if !p.cfg.Faults.Has(FaultSharingConfigIgnored) {
		var err error
		if shared, err = p.sharing.prepareSharing(claim, results, p.lib.deviceUUID); err != nil {
			return nil, err
		}
	}
	var held []heldDevice
	var names []string
	for _, r := range results {
		d := heldDevice{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			UUID: p.lib.deviceUUID(r.Device), AdminAccess: ptr.Deref(r.AdminAccess, false)}
		if st := shared[r.Device]; st != (SharingState{}) {
			d.Sharing = &st
		}
		if !p.cfg.Faults.Has(FaultCDINotInjected) {
			d.CDIDeviceIDs = []string{cdiparser.QualifiedName(cdiVendor, cdiClaimClass, claimUID+"-"+r.Device)}
			names = append(names, r.Device)
		}
		held = append(held, d)
	}
	if err := p.writeMigSpec(claimUID, names, p.sharingEdits(held)); err != nil {
		return nil, err
	}
	if err := p.enter(claim, stagePrepared, held); err != nil {
		return nil, err
	}
	return kubeletDevices(held), nil
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
// once): per device its nodes and its sharing edits (MPS), common to the claim /dev/nvidiactl,
// NVIDIA_VISIBLE_DEVICES and the nvidia-smi mounts.  No devices: no spec.
func (p *Preparer) writeMigSpec(claimUID string, names []string, edits map[string]cdispec.ContainerEdits) error {
	spec := &cdispec.Spec{Kind: cdiKind}
	var uuids []string
	seen := map[string]bool{}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		var nodes []*cdispec.DeviceNode
		if m := p.lib.MigByName(name); m != nil {
			gi := m.Slot.GI
			parent, err := p.cdi.deviceNode(fmt.Sprintf("nvidia%d", m.Parent.Minor), nvmlsim.NvidiaMajor, m.Parent.Minor, true)
			if err != nil {
				return fmt.Errorf("CDI spec of claim %s: %w", claimUID, err)
			}
			nodes = append(nodes, parent)
			for _, minor := range []int{nvmlsim.GIAccessMinor(m.Parent.Minor, gi), nvmlsim.CIAccessMinor(m.Parent.Minor, gi, 0)} {
				capNode, err := p.cdi.deviceNode(fmt.Sprintf("nvidia-caps/nvidia-cap%d", minor), nvmlsim.NvidiaCapsMajor, minor, true)
				if err != nil {
					return fmt.Errorf("CDI spec of claim %s: %w", claimUID, err)
				}
				nodes = append(nodes, capNode)
			}
			klog.Infof("Created MIG device %s (%s) on %s: GPU instance %d, compute instance 0", name, m.UUID(), m.Parent, gi)
		} else {
			g := p.lib.ByName(name)
			if g == nil {
				return fmt.Errorf("CDI spec of claim %s: no device %q", claimUID, name)
			}
			node, err := p.cdi.deviceNode(fmt.Sprintf("nvidia%d", g.Minor), nvmlsim.NvidiaMajor, g.Minor, true)
			if err != nil {
				return fmt.Errorf("CDI spec of claim %s: %w", claimUID, err)
			}
			nodes = append(nodes, node)
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: claimUID + "-" + name,
			ContainerEdits: cdispec.ContainerEdits{DeviceNodes: nodes}})
		uuids = append(uuids, p.lib.deviceUUID(name))
	}
	if len(spec.Devices) == 0 {
		return nil
	}
	common, err := p.cdi.commonEdits(uuids)
	if err != nil {
		return fmt.Errorf("CDI spec of claim %s, edits common to its devices: %w", claimUID, err)
	}
	spec.ContainerEdits = *common
	addDeviceEdits(spec, claimUID, edits)
	version, err := cdiapi.MinimumRequiredVersion(spec)
	if err != nil {
		return fmt.Errorf("CDI spec of claim %s: %w", claimUID, err)
	}
	spec.Version = version
	if err := p.cdi.WriteClaimSpec(claimUID, spec); err != nil {
		return fmt.Errorf("CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}

// restoreMigSpec writes a prepared claim's lost CDI spec again on a DynamicMIG node (see
// restoreSpec, whose counterpart it is).
func (p *Preparer) restoreMigSpec(claimUID string, e claimEntry) error {
	var names []string
	for _, d := range e.Devices {
		if len(d.CDIDeviceIDs) > 0 {
			names = append(names, d.DeviceName)
		}
	}
	if len(names) > 0 {
		klog.Warningf("CDI spec of prepared claim %s is missing: writing it again", claimUID)
	}
	return p.writeMigSpec(claimUID, names, p.sharingEdits(e.Devices))
}
