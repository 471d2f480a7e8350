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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Preparer does the node's part of a claim's life for this node's GPUs: preparing it (its
// GPU sharing applied, a CDI spec that hands its devices to containers, an entry in the
// ledger) and unpreparing it (all of that undone).  Full GPUs here; a DynamicMIG node's
// claims in mig.go.  The mutex lets one claim through at a time.
type Preparer struct {
	mu      sync.Mutex
	cfg     *Config
	lib     *DeviceLib
	cdi     *CDIHandler
	ledger  ledgerFile
	sharing *sharingManager
}

// NewPreparer opens the node's ledger: kept if this boot wrote it, begun empty otherwise (a
// reboot undid every preparation; the real driver drops its checkpoint then too).
func NewPreparer(cfg *Config, lib *DeviceLib, cdi *CDIHandler) (*Preparer, error) {
	p := &Preparer{
		cfg:     cfg,
		lib:     lib,
		cdi:     cdi,
		ledger:  ledgerFile(filepath.Join(cfg.DriverPluginPath(), LedgerFileName)),
		sharing: newSharingManager(cfg, lib),
	}
	boot := currentBootID()
	found, err := p.ledger.load()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		klog.Infof("No claim ledger in %s yet: beginning one", p.ledger)
	case err != nil:
		return nil, err
	case sameBoot(found.BootID, boot):
		klog.Infof("Claim ledger kept across the restart: %d claim(s) in it", len(found.Claims))
		if found.BootID == boot || boot == "" {
			return p, nil
		}
		found.BootID = boot
		if err := p.ledger.save(found); err != nil {
			return nil, err
		}
		return p, nil
	default:
		klog.Infof("Claim ledger of boot %s dropped in boot %s: the reboot undid its %d claim(s)",
			found.BootID, boot, len(found.Claims))
	}
	if err := p.ledger.save(&ledger{BootID: boot, Claims: map[string]claimEntry{}}); err != nil {
		return nil, err
	}
	return p, nil
}

// Prepare prepares one claim and returns its devices as the kubelet is to get them.  Asked
// again for a claim already prepared (by this process or an earlier one), it gives the same
// answer.
func (p *Preparer) Prepare(claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, err := p.ledger.load()
	if err != nil {
		return nil, err
	}
	if e := l.Claims[string(claim.UID)]; e.Stage == stagePrepared {
		klog.V(4).Infof("Claim %s was prepared before: the same devices again", describeClaim(claim))
		if err := p.restoreSpec(string(claim.UID), e); err != nil {
			return nil, err
		}
		return kubeletDevices(e.Devices), nil
	}
	if claim.Status.Allocation == nil {
		return nil, errors.New("it has no allocation yet")
	}
	if p.cfg.Faults.Has(FaultPrepareFails) {
		return nil, fmt.Errorf("simulated: cannot prepare claim %s on node %s: NVML: Unknown Error",
			describeClaim(claim), p.cfg.NodeName)
	}
	results, err := p.resultsHere(claim)
	if err != nil {
		return nil, err
	}
	if p.cfg.Faults.Has(FaultLastGPUFails) {
		if err := p.refuseLastGPU(claim, results); err != nil {
			return nil, err
		}
	}
	if p.lib.migs != nil {
		return p.prepareMig(claim, l, results)
	}
	if p.cfg.Faults.Has(FaultAdminAccessExclusive) {
		results = withoutAdminAccess(results)
	}
	if err := refuseHeld(l, string(claim.UID), results); err != nil {
		return nil, err
	}
	if err := p.enter(claim, stagePreparing, nil); err != nil {
		return nil, err
	}
	held, err := p.setUpGPUs(claim, results)
	if err != nil {
		return nil, err
	}
	if err := p.enter(claim, stagePrepared, held); err != nil {
		return nil, err
	}
	return kubeletDevices(held), nil
}

// resultsHere are the claim's allocation results this plugin serves: this driver's, from
// this node's pool (another pool's are logged and left alone).  A device the node does not
// have is an error.
func (p *Preparer) resultsHere(claim *resourceapi.ResourceClaim) ([]resourceapi.DeviceRequestAllocationResult, error) {
	var mine []resourceapi.DeviceRequestAllocationResult
	for _, r := range claim.Status.Allocation.Devices.Results {
		switch {
		case r.Driver != DriverName:
		case r.Pool != p.cfg.NodeName:
			klog.Warningf("Claim %s: leaving %s/%s alone, it is not in this node's pool %q",
				describeClaim(claim), r.Pool, r.Device, p.cfg.NodeName)
		case p.lib.ByName(r.Device) == nil && p.lib.MigByName(r.Device) == nil:
			return nil, fmt.Errorf("no device %q on this node", r.Device)
		default:
			mine = append(mine, r)
		}
	}
	return mine, nil
}

// enter writes the claim's line in the ledger: at stagePreparing before anything is set up
// (so that what a failed preparation leaves is known), at stagePrepared with its devices once
// all is.
func (p *Preparer) enter(claim *resourceapi.ResourceClaim, s stage, held []heldDevice) error {
	return p.ledger.edit(func(l *ledger) {
		l.Claims[string(claim.UID)] = claimEntry{Stage: s, Namespace: claim.Namespace, Name: claim.Name, Devices: held}
	})
}

// setUpGPUs applies the claim's sharing configs to its GPUs and writes its CDI spec: one CDI
// device per distinct GPU, in the order the results name them.  It returns what the claim
// now holds.
func (p *Preparer) setUpGPUs(claim *resourceapi.ResourceClaim, results []resourceapi.DeviceRequestAllocationResult) ([]heldDevice, error) {
	uid := string(claim.UID)
	shared := map[string]SharingState{}
	if !p.cfg.Faults.Has(FaultSharingConfigIgnored) {
		var err error
		shared, err = p.sharing.prepareSharing(claim, results, func(device string) string { return p.lib.ByName(device).UUID })
		if err != nil {
			return nil, err
		}
	}
	var gpus []*GpuInfo
	for _, r := range results {
		if g := p.lib.ByName(r.Device); !slices.Contains(gpus, g) {
			gpus = append(gpus, g)
		}
	}
	given := gpus // the GPU whose device node each CDI device really carries
	if p.cfg.Faults.Has(FaultCDIWrongDevice) {
		given = wrongDevices(gpus, p.lib.GPUs)
	}
	inject := !p.cfg.Faults.Has(FaultCDINotInjected)
	held := make([]heldDevice, 0, len(results))
	for _, r := range results {
		g := p.lib.ByName(r.Device)
		d := heldDevice{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, UUID: g.UUID,
			AdminAccess: ptr.Deref(r.AdminAccess, false)}
		if st := shared[r.Device]; st != (SharingState{}) {
			d.Sharing = &st
		}
		if inject {
			d.CDIDeviceIDs = []string{ClaimDeviceName(uid, g)}
			d.InjectedMinor = ptr.To(given[slices.Index(gpus, g)].Minor)
		}
		held = append(held, d)
	}
	if inject && len(gpus) > 0 {
		if err := p.writeSpec(uid, gpus, given, held); err != nil {
			return nil, err
		}
	}
	return held, nil
}

// writeSpec writes the claim's CDI spec: devices named after gpus, carrying given's nodes,
// with the sharing edits of what it holds.
func (p *Preparer) writeSpec(uid string, gpus, given []*GpuInfo, held []heldDevice) error {
	spec, err := p.cdi.BuildClaimSpec(uid, gpus, given)
	if err != nil {
		return fmt.Errorf("building the CDI spec of claim %s: %w", uid, err)
	}
	addDeviceEdits(spec, uid, p.sharingEdits(held))
	return p.cdi.WriteClaimSpec(uid, spec)
}

// restoreSpec writes the CDI spec of a prepared claim again if it is gone (a node whose
// /var/run was emptied while the ledger survived), so that the repeated answer still works.
func (p *Preparer) restoreSpec(uid string, e claimEntry) error {
	if _, err := os.Stat(p.cdi.SpecPath(uid)); err == nil {
		return nil
	}
	if p.lib.migs != nil {
		return p.restoreMigSpec(uid, e)
	}
	var gpus, given []*GpuInfo
	for _, d := range e.Devices {
		if len(d.CDIDeviceIDs) == 0 || d.InjectedMinor == nil {
			continue
		}
		g, real := p.lib.ByName(d.DeviceName), p.lib.ByName(fmt.Sprintf("gpu-%d", *d.InjectedMinor))
		if g != nil && real != nil && !slices.Contains(gpus, g) {
			gpus, given = append(gpus, g), append(given, real)
		}
	}
	if len(gpus) == 0 {
		return nil
	}
	klog.Warningf("CDI spec of prepared claim %s is missing: writing it again", uid)
	return p.writeSpec(uid, gpus, given, e.Devices)
}

// Unprepare undoes Prepare for one claim: its GPU sharing, its CDI spec, its ledger entry.  It
// returns the devices the claim held (for the log) and whether the ledger knew it; a claim it
// does not know is no error (the kubelet may ask twice), only a stray spec of it is removed.
func (p *Preparer) Unprepare(ref kubeletplugin.NamespacedObject) ([]heldDevice, bool, error) {
	if p.cfg.Faults.Has(FaultUnprepareFails) {
		return nil, false, fmt.Errorf("simulated: failed to unprepare devices of claim %s: device busy", ref.String())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	uid := string(ref.UID)
	l, err := p.ledger.load()
	if err != nil {
		return nil, false, err
	}
	e, known := l.Claims[uid]
	if !known {
		klog.V(2).Infof("Claim %s is not in the ledger: nothing of it to undo", ref.String())
	}
	if err := p.sharing.unprepareSharing(e.Devices); err != nil {
		return nil, known, fmt.Errorf("undoing the GPU sharing of its devices: %w", err)
	}
	if err := p.cdi.DeleteClaimSpec(uid); err != nil {
		return nil, known, fmt.Errorf("removing its CDI spec: %w", err)
	}
	if !known {
		return nil, false, nil
	}
	if p.cfg.Faults.Has(FaultUnprepareKeepsDevice) {
		// Says done, but the devices stay recorded as this claim's: they are never free again.
		klog.Infof("simulated: claim %s reported unprepared, its devices kept", ref.String())
		return e.Devices, true, nil
	}
	if err := p.ledger.edit(func(l *ledger) { delete(l.Claims, uid) }); err != nil {
		return nil, true, fmt.Errorf("taking it out of the ledger: %w", err)
	}
	return e.Devices, true, nil
}

// sharingEdits are the container edits the claim's sharing configs add, by device name.
func (p *Preparer) sharingEdits(held []heldDevice) map[string]cdispec.ContainerEdits {
	out := map[string]cdispec.ContainerEdits{}
	for _, d := range held {
		if d.Sharing != nil && d.Sharing.MpsControlDaemonID != "" {
			out[d.DeviceName] = p.sharing.mpsEdits(d.Sharing.MpsControlDaemonID)
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

// refuseHeld is the error for a claim given a device that another claim still holds on this
// node (prepared and not unprepared since: a claim the node never released, or a race the
// scheduler lost), nil if there is none.  A device given with adminAccess is shared by design
// and never refused.  The real driver refuses the same claims (upstream device_state.go,
// validateNoOverlappingPreparedDevices); the message names the device and the other claim's
// UID, which is what the suite's diagnosis reads (diagnosis/rules/node.py).
func refuseHeld(l *ledger, uid string, results []resourceapi.DeviceRequestAllocationResult) error {
	exclusive := map[string]bool{}
	for _, r := range results {
		if !ptr.Deref(r.AdminAccess, false) {
			exclusive[r.Device] = true
		}
	}
	return l.heldByOthers(uid, func(other string, d heldDevice) error {
		if exclusive[d.DeviceName] {
			return fmt.Errorf("device %s is held by claim %s, prepared on this node and not unprepared since",
				d.DeviceName, other)
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

// kubeletDevices is what the kubelet is told of the devices a claim holds.
func kubeletDevices(held []heldDevice) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(held))
	for _, d := range held {
		out = append(out, kubeletplugin.Device{
			Requests:     slices.Clone(d.Requests),
			PoolName:     d.PoolName,
			DeviceName:   d.DeviceName,
			CDIDeviceIDs: slices.Clone(d.CDIDeviceIDs),
		})
	}
	return out
}

// describeClaim names a claim in logs and errors as the kubelet plugin library names the
// claims it passes to Unprepare: <namespace>/<name>:<uid>.
func describeClaim(claim *resourceapi.ResourceClaim) string {
	return kubeletplugin.NamespacedObject{
		NamespacedName: types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name},
		UID:            claim.UID,
	}.String()
}

// refuseLastGPU is the last-gpu-fails fault: the node's highest-numbered GPU cannot be set up
// (as a GPU that fell off the bus after it was published), its neighbours can.
func (p *Preparer) refuseLastGPU(claim *resourceapi.ResourceClaim, results []resourceapi.DeviceRequestAllocationResult) error {
	if len(p.lib.GPUs) == 0 {
		return nil
	}
	last := p.lib.GPUs[0]
	for _, g := range p.lib.GPUs {
		if g.Minor > last.Minor {
			last = g
		}
	}
	for _, r := range results {
		if r.Device == last.CanonicalName() {
			return fmt.Errorf("simulated: cannot prepare claim %s: GPU %s (%s) on node %s: NVML: GPU is lost",
				describeClaim(claim), r.Device, last.UUID, p.cfg.NodeName)
		}
	}
	return nil
}
