package plugin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// DeviceState prepares and unprepares claims, as upstream's DeviceState
// (cmd/gpu-kubelet-plugin/device_state.go) does for full GPUs with the default GpuConfig.
type DeviceState struct {
	sync.Mutex
	cfg        *Config
	lib        *DeviceLib
	cdi        *CDIHandler
	checkpoint checkpointStore
	sharing    *sharingManager
}

// NewDeviceState opens (or creates) the checkpoint.  A checkpoint from an earlier boot is
// discarded, as upstream does.
func NewDeviceState(cfg *Config, lib *DeviceLib, cdi *CDIHandler) (*DeviceState, error) {
	s := &DeviceState{
		cfg:        cfg,
		lib:        lib,
		cdi:        cdi,
		checkpoint: checkpointStore{path: filepath.Join(cfg.DriverPluginPath(), CheckpointFileBasename)},
		sharing:    newSharingManager(cfg, lib),
	}
	bootID := currentBootID()
	cp, err := s.checkpoint.read()
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	case cp.NodeBootID == "" || bootID == "" || cp.NodeBootID == bootID:
		if cp.NodeBootID != bootID && bootID != "" {
			cp.NodeBootID = bootID
			if err := s.checkpoint.write(cp); err != nil {
				return nil, err
			}
		}
		klog.Infof("Using existing checkpoint with %d prepared claim(s)", len(cp.PreparedClaims))
		return s, nil
	default:
		klog.Infof("Invalidating checkpoint: checkpoint nodeBootID %q != current %q", cp.NodeBootID, bootID)
	}
	klog.Infof("Create empty checkpoint")
	if err := s.checkpoint.write(&Checkpoint{NodeBootID: bootID, PreparedClaims: map[string]PreparedClaim{}}); err != nil {
		return nil, fmt.Errorf("unable to create fresh checkpoint: %w", err)
	}
	return s, nil
}

// Prepare prepares one claim and returns its devices with their CDI device IDs.  It is
// idempotent: a claim prepared before (also by an earlier process) returns what it returned
// then.
func (s *DeviceState) Prepare(claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	s.Lock()
	defer s.Unlock()
	claimUID := string(claim.UID)

	cp, err := s.checkpoint.read()
	if err != nil {
		return nil, fmt.Errorf("unable to get checkpoint: %w", err)
	}
	if pc, ok := cp.PreparedClaims[claimUID]; ok && pc.CheckpointState == ClaimCheckpointStatePrepareCompleted {
		klog.V(4).Infof("Skip prepare: claim already in PrepareCompleted state: %s", ResourceClaimToString(claim))
		if err := s.ensureSpec(claimUID, pc); err != nil {
			return nil, err
		}
		return toKubeletDevices(pc.PreparedDevices), nil
	}
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim not yet allocated")
	}
	if s.cfg.Faults.Has(FaultPrepareFails) {
		return nil, fmt.Errorf("simulated: cannot prepare claim %s on node %s: NVML: Unknown Error",
			ResourceClaimToString(claim), s.cfg.NodeName)
	}

	// This driver's results for this node's pool.
	var results []resourceapi.DeviceRequestAllocationResult
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != DriverName {
			continue
		}
		if r.Pool != s.cfg.NodeName {
			klog.Warningf("Ignoring device %s/%s of claim %s: not from this node's pool %q",
				r.Pool, r.Device, ResourceClaimToString(claim), s.cfg.NodeName)
			continue
		}
		if s.lib.ByName(r.Device) == nil && s.lib.MigByName(r.Device) == nil {
			return nil, fmt.Errorf("prepare devices failed: allocatable not found for device %q", r.Device)
		}
		results = append(results, r)
	}
	if s.lib.migs != nil { // a node with MIG-capable GPUs under DynamicMIG: see mig.go
		return s.prepareMig(claim, cp, results)
	}
	if s.cfg.Faults.Has(FaultAdminAccessExclusive) {
		results = withoutAdminAccess(results)
	}
	if err := validateNoOverlappingPreparedDevices(cp, claimUID, results); err != nil {
		return nil, fmt.Errorf("unable to prepare claim %v: %w", claimUID, err)
	}

	err = s.checkpoint.update(func(cp *Checkpoint) {
		cp.PreparedClaims[claimUID] = PreparedClaim{
			CheckpointState: ClaimCheckpointStatePrepareStarted,
			Namespace:       claim.Namespace,
			Name:            claim.Name,
		}
	})
	if err != nil {
		return nil, fmt.Errorf("unable to update checkpoint: %w", err)
	}

	// The claim's opaque configs (GPU sharing), decoded, validated and applied as upstream.
	sharing := map[string]SharingState{}
	if !s.cfg.Faults.Has(FaultSharingConfigIgnored) {
		uuidOf := func(device string) string { return s.lib.ByName(device).UUID }
		if sharing, err = s.sharing.prepareSharing(claim, results, uuidOf); err != nil {
			return nil, fmt.Errorf("prepare devices failed: %w", err)
		}
	}

	// Distinct GPUs of the claim, in result order; each becomes one CDI device.
	var allocated []*GpuInfo
	for _, r := range results {
		gpu := s.lib.ByName(r.Device)
		if !slices.Contains(allocated, gpu) {
			allocated = append(allocated, gpu)
		}
	}
	injected := allocated
	if s.cfg.Faults.Has(FaultCDIWrongDevice) {
		injected = wrongDevices(allocated, s.lib.GPUs)
	}
	injectedFor := map[string]*GpuInfo{}
	for i, g := range allocated {
		injectedFor[g.CanonicalName()] = injected[i]
	}

	var devices []PreparedDevice
	for _, r := range results {
		gpu := s.lib.ByName(r.Device)
		d := PreparedDevice{
			Requests:    []string{r.Request},
			PoolName:    r.Pool,
			DeviceName:  r.Device,
			UUID:        gpu.UUID,
			AdminAccess: ptr.Deref(r.AdminAccess, false),
		}
		if st, ok := sharing[r.Device]; ok && st != (SharingState{}) {
			d.Sharing = &st
		}
		if !s.cfg.Faults.Has(FaultCDINotInjected) {
			d.CDIDeviceIDs = []string{ClaimDeviceName(claimUID, gpu)}
			d.InjectedMinor = ptr.To(injectedFor[gpu.CanonicalName()].Minor)
		}
		devices = append(devices, d)
	}

	if len(allocated) > 0 && !s.cfg.Faults.Has(FaultCDINotInjected) {
		spec, err := s.cdi.BuildClaimSpec(claimUID, allocated, injected)
		if err != nil {
			return nil, fmt.Errorf("unable to create CDI spec file for claim: %w", err)
		}
		addDeviceEdits(spec, claimUID, s.sharingEdits(devices))
		if err := s.cdi.WriteClaimSpec(claimUID, spec); err != nil {
			return nil, fmt.Errorf("unable to create CDI spec file for claim: %w", err)
		}
	}

	err = s.checkpoint.update(func(cp *Checkpoint) {
		cp.PreparedClaims[claimUID] = PreparedClaim{
			CheckpointState: ClaimCheckpointStatePrepareCompleted,
			Namespace:       claim.Namespace,
			Name:            claim.Name,
			PreparedDevices: devices,
		}
	})
	if err != nil {
		return nil, fmt.Errorf("unable to update checkpoint: %w", err)
	}
	return toKubeletDevices(devices), nil
}

// ensureSpec rewrites the CDI spec of a prepared claim if it went missing (e.g. /var/run
// was emptied while the checkpoint survived), so that an idempotent prepare stays usable.
func (s *DeviceState) ensureSpec(claimUID string, pc PreparedClaim) error {
	if s.lib.migs != nil { // a DynamicMIG node: see mig.go
		return s.ensureMigSpec(claimUID, pc)
	}
	var allocated, injected []*GpuInfo
	for _, d := range pc.PreparedDevices {
		if len(d.CDIDeviceIDs) == 0 || d.InjectedMinor == nil {
			continue
		}
		gpu := s.lib.ByName(d.DeviceName)
		real := s.lib.ByName(fmt.Sprintf("gpu-%d", *d.InjectedMinor))
		if gpu == nil || real == nil || slices.Contains(allocated, gpu) {
			continue
		}
		allocated, injected = append(allocated, gpu), append(injected, real)
	}
	if len(allocated) == 0 {
		return nil
	}
	if _, err := os.Stat(s.cdi.SpecPath(claimUID)); err == nil {
		return nil
	}
	klog.Warningf("CDI spec of prepared claim %s is missing: writing it again", claimUID)
	spec, err := s.cdi.BuildClaimSpec(claimUID, allocated, injected)
	if err != nil {
		return fmt.Errorf("unable to create CDI spec file for claim: %w", err)
	}
	addDeviceEdits(spec, claimUID, s.sharingEdits(pc.PreparedDevices))
	return s.cdi.WriteClaimSpec(claimUID, spec)
}

// Unprepare undoes Prepare: it deletes the claim's CDI spec and checkpoint entry.  A claim
// that is not in the checkpoint is not an error (the call must be idempotent).  It returns
// the devices that were prepared, for the log.
func (s *DeviceState) Unprepare(ref kubeletplugin.NamespacedObject) ([]PreparedDevice, bool, error) {
	if s.cfg.Faults.Has(FaultUnprepareFails) {
		return nil, false, fmt.Errorf("simulated: failed to unprepare devices of claim %s: device busy", ref.String())
	}
	s.Lock()
	defer s.Unlock()
	claimUID := string(ref.UID)
	cp, err := s.checkpoint.read()
	if err != nil {
		return nil, false, fmt.Errorf("unable to get checkpoint: %w", err)
	}
	pc, ok := cp.PreparedClaims[claimUID]
	if !ok {
		klog.V(2).Infof("Unprepare noop: claim not found in checkpoint data: %v", ref.String())
		if err := s.cdi.DeleteClaimSpec(claimUID); err != nil {
			return nil, false, fmt.Errorf("unable to delete CDI spec file for claim: %w", err)
		}
		return nil, false, nil
	}
	if err := s.sharing.unprepareSharing(pc.PreparedDevices); err != nil {
		return nil, true, fmt.Errorf("unprepare devices failed for claim %s: %w", ref.String(), err)
	}
	if err := s.cdi.DeleteClaimSpec(claimUID); err != nil {
		return nil, true, fmt.Errorf("unable to delete CDI spec file for claim: %w", err)
	}
	if s.cfg.Faults.Has(FaultUnprepareKeepsDevice) {
		// Says done, but the devices stay recorded as this claim's: they are never free again.
		klog.Infof("simulated: claim %s reported unprepared, its devices kept", ref.String())
		return pc.PreparedDevices, true, nil
	}
	if err := s.checkpoint.update(func(cp *Checkpoint) { delete(cp.PreparedClaims, claimUID) }); err != nil {
		return nil, true, fmt.Errorf("error deleting claim from checkpoint: %w", err)
	}
	return pc.PreparedDevices, true, nil
}

// sharingEdits are the container edits the claim's sharing configs add, by device name.
func (s *DeviceState) sharingEdits(devices []PreparedDevice) map[string]cdispec.ContainerEdits {
	out := map[string]cdispec.ContainerEdits{}
	for _, d := range devices {
		if d.Sharing != nil && d.Sharing.MpsControlDaemonID != "" {
			out[d.DeviceName] = s.sharing.mpsEdits(d.Sharing.MpsControlDaemonID)
		}
	}
	return out
}

// withoutAdminAccess is the admin-access-exclusive fault: the results as a driver that does
// not know adminAccess sees them, exclusive like any other.
func withoutAdminAccess(results []resourceapi.DeviceRequestAllocationResult) []resourceapi.DeviceRequestAllocationResult {
	out := make([]resourceapi.DeviceRequestAllocationResult, len(results))
	for i, r := range results {
		r.AdminAccess = nil
		out[i] = r
	}
	return out
}

// validateNoOverlappingPreparedDevices is upstream's check (device_state.go): a non-admin
// device already prepared for another claim must not be prepared again.
func validateNoOverlappingPreparedDevices(cp *Checkpoint, claimUID string, results []resourceapi.DeviceRequestAllocationResult) error {
	requested := map[string]bool{}
	for _, r := range results {
		if !ptr.Deref(r.AdminAccess, false) {
			requested[r.Device] = true
		}
	}
	return cp.heldByOthers(claimUID, func(uid string, d PreparedDevice) error {
		if requested[d.DeviceName] {
			return fmt.Errorf("requested device %s is already allocated to different claim %s", d.DeviceName, uid)
		}
		return nil
	})
}

// wrongDevices is the cdi-wrong-device fault: for each allocated GPU, a GPU of the same node
// that the claim does not hold, the next ones by minor after the claim's lowest minor,
// wrapping around.  If the claim holds every GPU, there is no wrong one: the same set.
func wrongDevices(allocated, all []*GpuInfo) []*GpuInfo {
	if len(allocated) == 0 {
		return nil
	}
	inClaim := map[int]bool{}
	for _, g := range allocated {
		inClaim[g.Minor] = true
	}
	byMinor := slices.Clone(all)
	sort.Slice(byMinor, func(i, j int) bool { return byMinor[i].Minor < byMinor[j].Minor })
	sortedAlloc := slices.Clone(allocated)
	sort.Slice(sortedAlloc, func(i, j int) bool { return sortedAlloc[i].Minor < sortedAlloc[j].Minor })
	start := sortedAlloc[0].Minor
	var others []*GpuInfo
	for _, g := range byMinor {
		if !inClaim[g.Minor] && g.Minor > start {
			others = append(others, g)
		}
	}
	for _, g := range byMinor {
		if !inClaim[g.Minor] && g.Minor < start {
			others = append(others, g)
		}
	}
	if len(others) == 0 {
		return slices.Clone(allocated)
	}
	rank := map[int]int{}
	for i, g := range sortedAlloc {
		rank[g.Minor] = i
	}
	out := make([]*GpuInfo, len(allocated))
	for i, g := range allocated {
		out[i] = others[rank[g.Minor]%len(others)]
	}
	return out
}

func toKubeletDevices(devices []PreparedDevice) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(devices))
	for _, d := range devices {
		out = append(out, kubeletplugin.Device{
			Requests:     slices.Clone(d.Requests),
			PoolName:     d.PoolName,
			DeviceName:   d.DeviceName,
			CDIDeviceIDs: slices.Clone(d.CDIDeviceIDs),
		})
	}
	return out
}

// ResourceClaimToString is upstream's types.go format: <namespace>/<name>:<uid>.
func ResourceClaimToString(rc *resourceapi.ResourceClaim) string {
	return fmt.Sprintf("%s/%s:%s", rc.Namespace, rc.Name, rc.UID)
}
