package plugin

import (
	"encoding/json"
	"k8s.io/client-go/kubernetes/fake"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/runtime-spec/specs-go"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"draconf.local/testbed/gpu-driver/internal/nvmlsim"
)

const (
	testNode       = "gpu-node-0"
	hostDriverRoot = "/run/nvidia/driver"
	h100Memory     = 85520809984
)

var testUUIDs = []string{
	"GPU-1b7f4a2c-0000-0000-0000-000000000000",
	"GPU-1b7f4a2c-1111-1111-1111-111111111111",
	"GPU-1b7f4a2c-2222-2222-2222-222222222222",
	"GPU-1b7f4a2c-3333-3333-3333-333333333333",
}

// driverRoot makes a simulated driver root with n H100s (device nodes are plain files: the
// plugin then uses major 195 and the GPU's minor).
func driverRoot(t *testing.T, n int, tweak func(*nvmlsim.Data)) string {
	t.Helper()
	root := t.TempDir()
	data := &nvmlsim.Data{DriverVersion: "580.95.05", CudaDriverVersion: "13.0"}
	for i := 0; i < n; i++ {
		data.GPUs = append(data.GPUs, nvmlsim.GPU{
			Minor: i, UUID: testUUIDs[i], ProductName: "NVIDIA H100 80GB HBM3", Brand: "Nvidia",
			Architecture: "Hopper", CudaComputeCapability: "9.0",
			PCIBusID: []string{"0000:18:00.0", "0000:28:00.0", "0000:38:00.0", "0000:48:00.0"}[i],
			PCIeRoot: []string{"pci0000:17", "pci0000:27", "pci0000:37", "pci0000:47"}[i], MemoryBytes: h100Memory,
		})
	}
	if tweak != nil {
		tweak(data)
	}
	raw, _ := json.Marshal(data)
	files := map[string][]byte{nvmlsim.RelPath: raw, "usr/bin/nvidia-smi": []byte("#!stand-in"), "dev/nvidiactl": nil}
	for i := 0; i < n; i++ {
		files[filepath.Join("dev", "nvidia"+string(rune('0'+i)))] = nil
	}
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

type bed struct {
	cfg    *Config
	lib    *DeviceLib
	prep   *Preparer
	cdi    *CDIHandler
	client *fake.Clientset // the API server of sharing beds (MPS daemons)
}

func newBed(t *testing.T, n int, faults ...Fault) *bed {
	t.Helper()
	fs := Faults{}
	for _, f := range faults {
		fs[f] = true
	}
	cfg := &Config{
		NodeName:                    testNode,
		HostDriverRoot:              hostDriverRoot,
		ContainerDriverRoot:         driverRoot(t, n, nil),
		CDIRoot:                     filepath.Join(t.TempDir(), "cdi"),
		KubeletPluginsDirectoryPath: t.TempDir(),
		Faults:                      fs,
	}
	return reopen(t, cfg)
}

// reopen starts the plugin's state afresh on the same directories (a plugin restart).
func reopen(t *testing.T, cfg *Config) *bed {
	t.Helper()
	if err := os.MkdirAll(cfg.DriverPluginPath(), 0o750); err != nil {
		t.Fatal(err)
	}
	lib, err := NewDeviceLib(cfg.ContainerDriverRoot, cfg.Faults)
	if err != nil {
		t.Fatal(err)
	}
	cdi, err := NewCDIHandler(cfg.CDIRoot, cfg.HostDriverRoot, cfg.ContainerDriverRoot, lib.nvidiaSMIPath)
	if err != nil {
		t.Fatal(err)
	}
	cdi.simulate(cfg.Faults)
	prep, err := NewPreparer(cfg, lib, cdi)
	if err != nil {
		t.Fatal(err)
	}
	return &bed{cfg: cfg, lib: lib, prep: prep, cdi: cdi}
}

func claim(uid string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim-" + uid, UID: types.UID(uid)},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}
	for i, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "gpu" + string(rune('0'+i)), Driver: DriverName, Pool: testNode, Device: d})
	}
	return c
}

func readSpec(t *testing.T, b *bed, uid string) *cdispec.Spec {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(b.cfg.CDIRoot, "k8s.gpu.nvidia.com-claim_"+uid+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	spec := &cdispec.Spec{}
	if err := yaml.Unmarshal(raw, spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

func TestVersionNormalization(t *testing.T) {
	for in, want := range map[string]string{
		"580.95.05": "580.95.5", "13.0": "13.0.0", "9.0": "9.0.0", "12": "12.0.0",
		"v1.2.3": "1.2.3", "1.2.3-rc.1+b5": "1.2.3-rc.1+b5", "535.104.012": "535.104.12",
	} {
		if got, err := normalizeVersion(in); err != nil || got != want {
			t.Errorf("normalizeVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "abc", "1.2.3.4", "1..2"} {
		if _, err := normalizeVersion(bad); err == nil {
			t.Errorf("normalizeVersion(%q): no error", bad)
		}
	}
}

func TestParseFaults(t *testing.T) {
	f, err := ParseFaults("crash, no-devices", "", "attribute-drift")
	if err != nil || !f.Has(FaultCrash) || !f.Has(FaultNoDevices) || !f.Has(FaultAttributeDrift) || len(f) != 3 {
		t.Fatalf("ParseFaults = %v, %v", f, err)
	}
	if f.String() != "attribute-drift,crash,no-devices" {
		t.Errorf("String() = %q", f.String())
	}
	if _, err := ParseFaults("explode"); err == nil || !strings.Contains(err.Error(), "explode") {
		t.Errorf("unknown fault: %v", err)
	}
}

func TestSliceContents(t *testing.T) {
	b := newBed(t, 2)
	res := b.lib.DriverResources(testNode, b.cfg.Faults)
	if len(res.Pools) != 1 {
		t.Fatalf("pools: %v", res.Pools)
	}
	pool, ok := res.Pools[testNode]
	if !ok || len(pool.Slices) != 1 || len(pool.Slices[0].Devices) != 2 {
		t.Fatalf("want one pool %q with one slice of 2 devices: %+v", testNode, res.Pools)
	}
	dev := pool.Slices[0].Devices[0]
	if dev.Name != "gpu-0" || pool.Slices[0].Devices[1].Name != "gpu-1" {
		t.Errorf("device names: %s, %s", dev.Name, pool.Slices[0].Devices[1].Name)
	}
	s := func(v string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: ptr.To(v)} }
	v := func(v string) resourceapi.DeviceAttribute {
		return resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
	}
	want := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":                            s("gpu"),
		"uuid":                            s(testUUIDs[0]),
		"productName":                     s("NVIDIA H100 80GB HBM3"),
		"brand":                           s("Nvidia"),
		"architecture":                    s("Hopper"),
		"cudaComputeCapability":           v("9.0.0"),
		"driverVersion":                   v("580.95.5"),
		"cudaDriverVersion":               v("13.0.0"),
		"resource.kubernetes.io/pciBusID": s("0000:18:00.0"),
		"resource.kubernetes.io/pcieRoot": s("pci0000:17"),
	}
	if !reflect.DeepEqual(dev.Attributes, want) {
		got, _ := json.MarshalIndent(dev.Attributes, "", " ")
		t.Errorf("attributes:\n%s", got)
	}
	mem := dev.Capacity["memory"].Value
	if len(dev.Capacity) != 1 || mem.Value() != h100Memory || mem.Format != resource.BinarySI {
		t.Errorf("capacity: %+v", dev.Capacity)
	}
}

func TestSliceOptionalAttributes(t *testing.T) {
	root := driverRoot(t, 1, func(d *nvmlsim.Data) {
		d.GPUs[0].PCIeRoot = ""
		d.GPUs[0].AddressingMode = "ATS"
		d.CudaDriverVersion = "12.08"
	})
	lib, err := NewDeviceLib(root, Faults{})
	if err != nil {
		t.Fatal(err)
	}
	attrs := lib.GPUs[0].GetDevice().Attributes
	if _, ok := attrs["resource.kubernetes.io/pcieRoot"]; ok {
		t.Error("pcieRoot published without a PCIe root")
	}
	if got := attrs["addressingMode"].StringValue; got == nil || *got != "ATS" {
		t.Errorf("addressingMode = %v", got)
	}
	if got := *attrs["cudaDriverVersion"].VersionValue; got != "12.8.0" {
		t.Errorf("cudaDriverVersion = %s", got)
	}
}

func TestFaultAttributeDrift(t *testing.T) {
	b := newBed(t, 2, FaultAttributeDrift)
	for _, d := range b.lib.DriverResources(testNode, b.cfg.Faults).Pools[testNode].Slices[0].Devices {
		if _, ok := d.Attributes["productName"]; ok {
			t.Errorf("%s still has productName", d.Name)
		}
		if _, ok := d.Attributes["uuid"]; !ok {
			t.Errorf("%s lost other attributes", d.Name)
		}
	}
}

func TestFaultNoDevices(t *testing.T) {
	b := newBed(t, 2, FaultNoDevices)
	pool := b.lib.DriverResources(testNode, b.cfg.Faults).Pools[testNode]
	if len(pool.Slices) != 1 || len(pool.Slices[0].Devices) != 0 {
		t.Fatalf("want the pool's one empty slice: %+v", pool)
	}
	_, err := b.prep.Prepare(claim("c1", "gpu-0"))
	if err == nil || !strings.Contains(err.Error(), `no device "gpu-0" on this node`) {
		t.Errorf("prepare of an unknown device: %v", err)
	}
}

func TestDriverRootRequired(t *testing.T) {
	root := driverRoot(t, 1, nil)
	os.Remove(filepath.Join(root, "usr/bin/nvidia-smi"))
	if _, err := NewDeviceLib(root, Faults{}); err == nil || !strings.Contains(err.Error(), "nvidia-smi") {
		t.Errorf("no nvidia-smi: %v", err)
	}
	if _, err := NewDeviceLib(t.TempDir(), Faults{}); err == nil || !strings.Contains(err.Error(), "no NVIDIA driver in driver root") {
		t.Errorf("empty driver root: %v", err)
	}
}

func TestPrepareWritesClaimSpec(t *testing.T) {
	b := newBed(t, 4)
	devs, err := b.prep.Prepare(claim("uid-1", "gpu-1", "gpu-2"))
	if err != nil {
		t.Fatal(err)
	}
	want := []kubeletplugin.Device{
		{Requests: []string{"gpu0"}, PoolName: testNode, DeviceName: "gpu-1", CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=uid-1-gpu-1"}},
		{Requests: []string{"gpu1"}, PoolName: testNode, DeviceName: "gpu-2", CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=uid-1-gpu-2"}},
	}
	if !reflect.DeepEqual(devs, want) {
		t.Fatalf("devices = %+v", devs)
	}
	spec := readSpec(t, b, "uid-1")
	if spec.Kind != "k8s.gpu.nvidia.com/claim" || spec.Version == "" {
		t.Errorf("kind %q version %q", spec.Kind, spec.Version)
	}
	if len(spec.Devices) != 2 || spec.Devices[0].Name != "uid-1-gpu-1" || spec.Devices[1].Name != "uid-1-gpu-2" {
		t.Fatalf("devices: %+v", spec.Devices)
	}
	node := spec.Devices[1].ContainerEdits.DeviceNodes[0]
	if *node != (cdispec.DeviceNode{Path: "/dev/nvidia2", HostPath: hostDriverRoot + "/dev/nvidia2", Type: "c", Major: 195, Minor: 2}) {
		t.Errorf("device node: %+v", node)
	}
	common := spec.ContainerEdits
	if !reflect.DeepEqual(common.Env, []string{"NVIDIA_VISIBLE_DEVICES=" + testUUIDs[1] + "," + testUUIDs[2]}) {
		t.Errorf("env: %v", common.Env)
	}
	if len(common.DeviceNodes) != 1 || *common.DeviceNodes[0] != (cdispec.DeviceNode{Path: "/dev/nvidiactl", HostPath: hostDriverRoot + "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255}) {
		t.Errorf("common device nodes: %+v", common.DeviceNodes)
	}
	wantMounts := []cdispec.Mount{
		{HostPath: hostDriverRoot + "/usr/bin/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi", Options: []string{"ro", "nosuid", "nodev", "bind"}},
		{HostPath: hostDriverRoot + "/usr/share/nvidia-sim/nvml.json", ContainerPath: "/usr/share/nvidia-sim/nvml.json", Options: []string{"ro", "nosuid", "nodev", "bind"}},
	}
	if len(common.Mounts) != 2 || !reflect.DeepEqual(*common.Mounts[0], wantMounts[0]) || !reflect.DeepEqual(*common.Mounts[1], wantMounts[1]) {
		t.Errorf("mounts: %+v %+v", common.Mounts[0], common.Mounts[1])
	}

	// The CDI device IDs resolve, and inject what the spec says, through the CDI library as a
	// runtime uses it.
	cache, _ := cdiapi.NewCache(cdiapi.WithSpecDirs(b.cfg.CDIRoot), cdiapi.WithAutoRefresh(false))
	oci := &ocispec.Spec{Process: &ocispec.Process{}, Linux: &ocispec.Linux{}}
	if unresolved, err := cache.InjectDevices(oci, "k8s.gpu.nvidia.com/claim=uid-1-gpu-1"); err != nil {
		t.Fatalf("inject: %v (unresolved %v)", err, unresolved)
	}
	var paths []string
	for _, d := range oci.Linux.Devices {
		paths = append(paths, d.Path)
	}
	slices.Sort(paths)
	if !reflect.DeepEqual(paths, []string{"/dev/nvidia1", "/dev/nvidiactl"}) {
		t.Errorf("injected devices: %v", paths)
	}
}

func TestPrepareIdempotentAndRestart(t *testing.T) {
	b := newBed(t, 2)
	c := claim("uid-1", "gpu-0")
	first, err := b.prep.Prepare(c)
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.prep.Prepare(c)
	if err != nil || !reflect.DeepEqual(first, second) {
		t.Fatalf("second prepare: %+v, %v", second, err)
	}
	// A missing spec of a prepared claim is written again.
	specPath := b.cdi.SpecPath("uid-1")
	os.Remove(specPath)
	if _, err := b.prep.Prepare(c); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(specPath); err != nil {
		t.Fatalf("spec not rewritten: %v", err)
	}
	// The ledger records the claim.
	raw, _ := os.ReadFile(filepath.Join(b.cfg.DriverPluginPath(), "checkpoint.json"))
	var l ledger
	if err := json.Unmarshal(raw, &l); err != nil || l.Claims["uid-1"].Stage != stagePrepared ||
		l.Claims["uid-1"].Name != "claim-uid-1" {
		t.Fatalf("ledger: %s (%v)", raw, err)
	}

	// A restarted plugin unprepares it.
	restarted := reopen(t, b.cfg)
	devs, found, err := restarted.prep.Unprepare(ref("uid-1"))
	if err != nil || !found || len(devs) != 1 || devs[0].UUID != testUUIDs[0] {
		t.Fatalf("unprepare after restart: %+v %v %v", devs, found, err)
	}
	if _, err := os.Stat(specPath); !os.IsNotExist(err) {
		t.Errorf("spec still there: %v", err)
	}
	raw, _ = os.ReadFile(filepath.Join(b.cfg.DriverPluginPath(), "checkpoint.json"))
	if strings.Contains(string(raw), "uid-1") {
		t.Errorf("the ledger still has the claim: %s", raw)
	}
	// Unprepare is idempotent.
	if _, found, err := restarted.prep.Unprepare(ref("uid-1")); err != nil || found {
		t.Errorf("second unprepare: %v %v", found, err)
	}
}

func ref(uid string) kubeletplugin.NamespacedObject {
	return kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "claim-" + uid}, UID: types.UID(uid)}
}

func TestPrepareRejectsOverlap(t *testing.T) {
	b := newBed(t, 2)
	if _, err := b.prep.Prepare(claim("a", "gpu-0")); err != nil {
		t.Fatal(err)
	}
	_, err := b.prep.Prepare(claim("b", "gpu-0"))
	if err == nil || !strings.Contains(err.Error(), "device gpu-0 is held by claim a,") {
		t.Fatalf("overlap: %v", err)
	}
	admin := claim("c", "gpu-0")
	admin.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
	if _, err := b.prep.Prepare(admin); err != nil {
		t.Fatalf("admin access: %v", err)
	}
}

func TestAdminAccessExclusiveFault(t *testing.T) {
	b := newBed(t, 2, FaultAdminAccessExclusive)
	if _, err := b.prep.Prepare(claim("a", "gpu-0")); err != nil {
		t.Fatal(err)
	}
	admin := claim("c", "gpu-0")
	admin.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
	_, err := b.prep.Prepare(admin)
	if err == nil || !strings.Contains(err.Error(), "device gpu-0 is held by claim a,") {
		t.Fatalf("admin access under the fault: %v", err)
	}
}

func TestPrepareIgnoresOtherDriversAndPools(t *testing.T) {
	b := newBed(t, 1)
	c := claim("uid-1", "gpu-0")
	c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
		resourceapi.DeviceRequestAllocationResult{Request: "nic", Driver: "nic.example.com", Pool: testNode, Device: "eth0"},
		resourceapi.DeviceRequestAllocationResult{Request: "x", Driver: DriverName, Pool: "other-node", Device: "gpu-0"})
	devs, err := b.prep.Prepare(c)
	if err != nil || len(devs) != 1 || devs[0].DeviceName != "gpu-0" {
		t.Fatalf("devs %+v err %v", devs, err)
	}
	if _, err := b.prep.Prepare(&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{UID: "u"}}); err == nil {
		t.Error("unallocated claim prepared")
	}
}

func TestFaultCDINotInjected(t *testing.T) {
	b := newBed(t, 2, FaultCDINotInjected)
	devs, err := b.prep.Prepare(claim("uid-1", "gpu-0"))
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0].DeviceName != "gpu-0" || len(devs[0].CDIDeviceIDs) != 0 {
		t.Errorf("devices: %+v", devs)
	}
	if entries, _ := os.ReadDir(b.cfg.CDIRoot); len(entries) != 0 {
		t.Errorf("CDI specs written: %v", entries)
	}
	if _, _, err := b.prep.Unprepare(ref("uid-1")); err != nil {
		t.Error(err)
	}
}

func TestFaultNVMLFlaky(t *testing.T) {
	b := newBed(t, 2, FaultNVMLFlaky)
	if _, err := b.prep.Prepare(claim("uid-1", "gpu-0")); err != nil {
		t.Fatal(err)
	}
	env := readSpec(t, b, "uid-1").ContainerEdits.Env
	if !reflect.DeepEqual(env, []string{"NVIDIA_VISIBLE_DEVICES=" + testUUIDs[0], FlakyEnv}) {
		t.Errorf("env: %v", env)
	}
}

func TestFaultCDIWrongDevice(t *testing.T) {
	b := newBed(t, 4, FaultCDIWrongDevice)
	devs, err := b.prep.Prepare(claim("uid-1", "gpu-1", "gpu-2"))
	if err != nil {
		t.Fatal(err)
	}
	// The IDs name the allocated devices ...
	if devs[0].CDIDeviceIDs[0] != "k8s.gpu.nvidia.com/claim=uid-1-gpu-1" {
		t.Errorf("ids: %+v", devs)
	}
	// ... but their edits hand out the node's next unallocated GPUs: 3, then 0 (wrapping).
	spec := readSpec(t, b, "uid-1")
	for i, wantMinor := range []int64{3, 0} {
		n := spec.Devices[i].ContainerEdits.DeviceNodes[0]
		if n.Minor != wantMinor || n.Path != "/dev/nvidia"+string(rune('0'+wantMinor)) {
			t.Errorf("device %s gets %+v, want minor %d", spec.Devices[i].Name, n, wantMinor)
		}
	}
	if got := spec.ContainerEdits.Env[0]; got != "NVIDIA_VISIBLE_DEVICES="+testUUIDs[3]+","+testUUIDs[0] {
		t.Errorf("env: %s", got)
	}

	// A claim holding every GPU gets the right ones: nothing wrong exists.
	b2 := newBed(t, 2, FaultCDIWrongDevice)
	if _, err := b2.prep.Prepare(claim("all", "gpu-0", "gpu-1")); err != nil {
		t.Fatal(err)
	}
	spec = readSpec(t, b2, "all")
	if spec.Devices[0].ContainerEdits.DeviceNodes[0].Minor != 0 || spec.Devices[1].ContainerEdits.DeviceNodes[0].Minor != 1 {
		t.Errorf("full claim: %+v", spec.Devices)
	}
}

func TestWrongDevices(t *testing.T) {
	all := []*GpuInfo{{Minor: 0}, {Minor: 1}, {Minor: 2}, {Minor: 3}}
	minors := func(gs []*GpuInfo) []int {
		var out []int
		for _, g := range gs {
			out = append(out, g.Minor)
		}
		return out
	}
	for _, c := range []struct{ alloc, want []int }{
		{[]int{2}, []int{3}},
		{[]int{3}, []int{0}},
		{[]int{0, 1}, []int{2, 3}},
		{[]int{3, 1}, []int{0, 2}},
		{[]int{0, 1, 2}, []int{3, 3, 3}},
		{[]int{0, 1, 2, 3}, []int{0, 1, 2, 3}},
	} {
		var alloc []*GpuInfo
		for _, m := range c.alloc {
			alloc = append(alloc, all[m])
		}
		if got := minors(wrongDevices(alloc, all)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("wrongDevices(%v) = %v, want %v", c.alloc, got, c.want)
		}
	}
}

func TestFaultUnprepareFails(t *testing.T) {
	b := newBed(t, 1, FaultUnprepareFails)
	if _, err := b.prep.Prepare(claim("uid-1", "gpu-0")); err != nil {
		t.Fatal(err)
	}
	_, _, err := b.prep.Unprepare(ref("uid-1"))
	if err == nil || err.Error() != "simulated: failed to unprepare devices of claim ns/claim-uid-1:uid-1: device busy" {
		t.Fatalf("unprepare: %v", err)
	}
	if _, err := os.Stat(b.cdi.SpecPath("uid-1")); err != nil {
		t.Errorf("spec removed although unprepare failed: %v", err)
	}
}

func TestFaultPrepareFails(t *testing.T) {
	b := newBed(t, 1, FaultPrepareFails)
	_, err := b.prep.Prepare(claim("uid-1", "gpu-0"))
	if err == nil || !strings.Contains(err.Error(), "cannot prepare claim ns/claim-uid-1") {
		t.Fatalf("prepare under prepare-fails: %v", err)
	}
	if _, err := os.Stat(b.cdi.SpecPath("uid-1")); err == nil {
		t.Error("a CDI spec was written for a claim that was refused")
	}
}

// last-gpu-fails: the node's last GPU is refused, its neighbour is prepared as usual.
func TestFaultLastGPUFails(t *testing.T) {
	b := newBed(t, 2, FaultLastGPUFails)
	if _, err := b.prep.Prepare(claim("uid-0", "gpu-0")); err != nil {
		t.Fatalf("the healthy GPU: %v", err)
	}
	_, err := b.prep.Prepare(claim("uid-1", "gpu-1"))
	if err == nil || !strings.Contains(err.Error(), "GPU gpu-1 ("+testUUIDs[1]+")") || !strings.Contains(err.Error(), "GPU is lost") {
		t.Fatalf("the bad GPU: %v", err)
	}
	if _, err := os.Stat(b.cdi.SpecPath("uid-1")); err == nil {
		t.Error("a CDI spec was written for a claim that was refused")
	}
}

func TestFaultUnprepareKeepsDevice(t *testing.T) {
	b := newBed(t, 1, FaultUnprepareKeepsDevice)
	if _, err := b.prep.Prepare(claim("uid-1", "gpu-0")); err != nil {
		t.Fatal(err)
	}
	if _, found, err := b.prep.Unprepare(ref("uid-1")); err != nil || !found {
		t.Fatalf("unprepare must report success: found=%v err=%v", found, err)
	}
	if _, err := os.Stat(b.cdi.SpecPath("uid-1")); err == nil {
		t.Error("the CDI spec must go: the fault keeps the device, not the spec")
	}
	// The next claim for the same GPU meets the claim that was never really released.
	_, err := b.prep.Prepare(claim("uid-2", "gpu-0"))
	if err == nil || !strings.Contains(err.Error(), "uid-1") {
		t.Fatalf("the kept device must refuse the next claim, naming the old one: %v", err)
	}
}

func TestLedgerFromOtherBootIsDiscarded(t *testing.T) {
	dir := t.TempDir()
	bootIDPath = filepath.Join(dir, "boot_id")
	t.Cleanup(func() { bootIDPath = "/proc/sys/kernel/random/boot_id" })
	os.WriteFile(bootIDPath, []byte("boot-1\n"), 0o644)
	b := newBed(t, 1)
	if _, err := b.prep.Prepare(claim("uid-1", "gpu-0")); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := reopen(t, b.cfg).prep.Unprepare(ref("uid-1")); !found {
		// reopen on the same boot keeps it; prepare it again for the next step
		t.Fatal("same boot lost the ledger")
	}
	if _, err := b.prep.Prepare(claim("uid-2", "gpu-0")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(bootIDPath, []byte("boot-2\n"), 0o644)
	if _, found, _ := reopen(t, b.cfg).prep.Unprepare(ref("uid-2")); found {
		t.Error("ledger of an earlier boot kept")
	}
}

func TestUnhealthyGpuIsTainted(t *testing.T) {
	root := driverRoot(t, 3, func(d *nvmlsim.Data) {
		d.GPUs[1].Health = &nvmlsim.Health{Xid: 79}
		d.GPUs[2].Health = &nvmlsim.Health{Lost: true}
	})
	lib, err := NewDeviceLib(root, Faults{})
	if err != nil {
		t.Fatal(err)
	}
	devices := lib.DriverResources(testNode, Faults{}).Pools[testNode].Slices[0].Devices
	if len(devices) != 3 {
		t.Fatalf("an unhealthy GPU is still published (tainted), want 3 devices: %d", len(devices))
	}
	if devices[0].Taints != nil {
		t.Errorf("healthy gpu-0 tainted: %+v", devices[0].Taints)
	}
	got := func(d resourceapi.Device) []string {
		var out []string
		for _, taint := range d.Taints {
			if taint.TimeAdded == nil || taint.TimeAdded.Nanosecond() != 0 {
				t.Errorf("%s: timeAdded %v, want whole seconds", d.Name, taint.TimeAdded)
			}
			out = append(out, taint.Key+"="+taint.Value+":"+string(taint.Effect))
		}
		return out
	}
	if g := got(devices[1]); !slices.Equal(g, []string{"gpu.nvidia.com/xid=79:NoSchedule"}) {
		t.Errorf("gpu-1 taints: %v", g)
	}
	if g := got(devices[2]); !slices.Equal(g, []string{"gpu.nvidia.com/gpu-lost=:NoSchedule"}) {
		t.Errorf("gpu-2 taints: %v", g)
	}
}
