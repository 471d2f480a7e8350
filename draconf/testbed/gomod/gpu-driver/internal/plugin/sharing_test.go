package plugin

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"

	"draconf.local/testbed/gpu-driver/internal/nvmlsim"
	"draconf.local/testbed/gpu-driver/internal/smi"
)

// sharingBed is a bed whose plugin runs nvidia-smi in process against its driver root (the
// test root's device nodes are plain files, so the stand-in is told their minors).
func sharingBed(t *testing.T, gates string, faults ...Fault) *bed {
	t.Helper()
	b := newBed(t, 2, faults...)
	g, err := ParseFeatureGates(gates)
	if err != nil {
		t.Fatal(err)
	}
	b.cfg.FeatureGates = g
	b.state.sharing = newSharingManager(b.cfg, b.lib)
	b.state.sharing.smi = func(args ...string) ([]byte, error) {
		var out bytes.Buffer
		if code := smi.Run(args, &out, &out, smiEnv(b)); code != smi.ExitOK {
			return out.Bytes(), fmt.Errorf("exit status %d", code)
		}
		return out.Bytes(), nil
	}
	return b
}

func smiEnv(b *bed) smi.Env {
	root := b.cfg.ContainerDriverRoot
	return smi.Env{
		DevDir: filepath.Join(root, "dev"), NVMLPath: nvmlsim.Path(root), StateDir: nvmlsim.StateDir(root),
		Stat: func(p string) (uint64, bool, error) {
			var minor int
			if _, err := fmt.Sscanf(filepath.Base(p), "nvidia%d", &minor); err != nil {
				return 0, false, nil
			}
			return uint64(195<<8 | minor), true, nil
		},
	}
}

// withConfig gives the claim an opaque config for requests (none: every request).
func withConfig(c *resourceapi.ResourceClaim, raw string, requests ...string) *resourceapi.ResourceClaim {
	c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
		Source:   resourceapi.AllocationConfigSourceClaim,
		Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: DriverName, Parameters: runtime.RawExtension{Raw: []byte(raw)}}},
	})
	return c
}

const (
	tsLong = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`
	mps50  = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi"}}}`
	gates  = "TimeSlicingSettings=true,MPSSupport=true,"
)

func gpuState(t *testing.T, b *bed, uuid string) nvmlsim.GPUState {
	t.Helper()
	s, err := nvmlsim.LoadState(nvmlsim.StateDir(b.cfg.ContainerDriverRoot), uuid)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParseFeatureGates(t *testing.T) {
	g, err := ParseFeatureGates("TimeSlicingSettings=true,MPSSupport=false,")
	if err != nil || !g.Enabled(FeatureTimeSlicingSettings) || g.Enabled(FeatureMPSSupport) {
		t.Fatalf("%v %v", g, err)
	}
	if _, err := ParseFeatureGates("MPSSupport"); err == nil {
		t.Fatal("a gate without a value is refused")
	}
}

// gpu-test5: one claim, a TimeSlicing request and an MPS request.
func TestTimeSlicingAndMpsAreApplied(t *testing.T) {
	b := sharingBed(t, gates)
	c := claim("uid-ts", "gpu-0", "gpu-1")
	withConfig(c, tsLong, "gpu0")
	withConfig(c, mps50, "gpu1")
	if _, err := b.state.Prepare(c); err != nil {
		t.Fatal(err)
	}
	if s := gpuState(t, b, testUUIDs[0]); s.Mode() != nvmlsim.ComputeModeDefault || s.TimeSliceName() != "Long" {
		t.Fatalf("time-sliced GPU: %+v", s)
	}
	if s := gpuState(t, b, testUUIDs[1]); s.Mode() != nvmlsim.ComputeModeExclusiveProcess {
		t.Fatalf("MPS GPU: %+v", s)
	}
	spec := readSpec(t, b, "uid-ts")
	byName := map[string]int{}
	for i, d := range spec.Devices {
		byName[d.Name] = i
	}
	ts, mps := spec.Devices[byName["uid-ts-gpu-0"]], spec.Devices[byName["uid-ts-gpu-1"]]
	if len(ts.ContainerEdits.Env) != 0 || len(ts.ContainerEdits.Mounts) != 0 {
		t.Fatalf("time-slicing adds no container edits: %+v", ts.ContainerEdits)
	}
	if !slices.Contains(mps.ContainerEdits.Env, "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps") || len(mps.ContainerEdits.Mounts) != 2 {
		t.Fatalf("MPS edits: %+v", mps.ContainerEdits)
	}
	pipe := mps.ContainerEdits.Mounts[1].HostPath
	if fi, err := os.Stat(filepath.Join(pipe, "control")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the daemon's control pipe: %v %v", fi, err)
	}
	log, _ := os.ReadFile(filepath.Join(filepath.Dir(pipe), "log", "control.log"))
	for _, want := range []string{"set_default_active_thread_percentage 50",
		"set_default_device_pinned_mem_limit " + testUUIDs[1] + " 10240M"} {
		if !strings.Contains(string(log), want) {
			t.Fatalf("control.log lacks %q: %s", want, log)
		}
	}
	// The containers' view of the GPU state: the common edits mount it read-only.
	found := false
	for _, m := range spec.ContainerEdits.Mounts {
		found = found || (m.ContainerPath == "/"+nvmlsim.StateRelDir && slices.Contains(m.Options, "ro"))
	}
	if !found {
		t.Fatalf("GPU state not mounted: %+v", spec.ContainerEdits.Mounts)
	}

	if _, _, err := b.state.Unprepare(ref("uid-ts")); err != nil {
		t.Fatal(err)
	}
	if s := gpuState(t, b, testUUIDs[0]); s.TimeSliceName() != "Default" {
		t.Fatalf("unprepare resets the time slice: %+v", s)
	}
	if _, err := os.Stat(filepath.Dir(pipe)); !os.IsNotExist(err) {
		t.Fatalf("unprepare stops the MPS daemon: %v", err)
	}
}

func TestTimeSlicingWithoutIntervalIsDefault(t *testing.T) {
	b := sharingBed(t, gates)
	c := withConfig(claim("uid-d", "gpu-0"),
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing"}}`)
	if _, err := b.state.Prepare(c); err != nil {
		t.Fatal(err)
	}
	if pc := mustCheckpoint(t, b).PreparedClaims["uid-d"]; pc.PreparedDevices[0].Sharing == nil ||
		!pc.PreparedDevices[0].Sharing.TimeSliceApplied {
		t.Fatalf("checkpoint: %+v", pc)
	}
}

func mustCheckpoint(t *testing.T, b *bed) *Checkpoint {
	t.Helper()
	cp, err := b.state.checkpoint.read()
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// The driver's own words, as upstream's strict decoding and validation word them.
func TestInvalidConfigsAreRejected(t *testing.T) {
	cases := map[string]struct{ gates, raw, want string }{
		"unknown field": {gates, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long","quantum":"5ms"}}}`,
			`prepare devices failed: error getting opaque device configs: error decoding config parameters: strict decoding error: unknown field "sharing.timeSlicingConfig.quantum"`},
		"unknown strategy": {gates, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"Exclusive"}}`,
			"prepare devices failed: error validating GPU config: unknown GPU sharing strategy: Exclusive, supported GPU sharing strategies: TimeSlicing, MPS"},
		"unknown interval": {gates, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Forever"}}}`,
			"error validating GPU config: unknown time-slice interval: Forever, supported time-slice intervals: Default, Short, Medium, Long"},
		"gate off": {"", tsLong,
			`error validating GPU config: "TimeSlicing" is selected as the GPU sharing strategy, but the "TimeSlicingSettings" feature gate is not enabled`},
		"unknown kind": {gates, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuSettings"}`,
			`no kind "GpuSettings" is registered for version "resource.nvidia.com/v1beta1"`},
		"percentage": {gates, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":150}}}`,
			"active thread percentage must not be greater than 100"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := sharingBed(t, tc.gates)
			_, err := b.state.Prepare(withConfig(claim("uid-x", "gpu-0"), tc.raw))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if s := gpuState(t, b, testUUIDs[0]); s != (nvmlsim.GPUState{}) {
				t.Fatalf("a refused config changes nothing: %+v", s)
			}
		})
	}
}

func TestOtherDriversConfigIsIgnored(t *testing.T) {
	b := sharingBed(t, gates)
	c := claim("uid-o", "gpu-0")
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{
		Source: resourceapi.AllocationConfigSourceClaim,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: "gpu.example.com", Parameters: runtime.RawExtension{Raw: []byte(`{"anything": 1}`)}}},
	}}
	if _, err := b.state.Prepare(c); err != nil {
		t.Fatal(err)
	}
}

func TestFaultSharingConfigIgnored(t *testing.T) {
	b := sharingBed(t, gates, FaultSharingConfigIgnored)
	c := claim("uid-f", "gpu-0", "gpu-1")
	withConfig(c, tsLong, "gpu0")
	withConfig(c, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"Bogus"}}`, "gpu1")
	if _, err := b.state.Prepare(c); err != nil {
		t.Fatalf("the fault prepares without reading configs: %v", err)
	}
	if s := gpuState(t, b, testUUIDs[0]); s != (nvmlsim.GPUState{}) {
		t.Fatalf("nothing applied: %+v", s)
	}
}

func TestMpsLimits(t *testing.T) {
	uuids := []string{"GPU-a", "GPU-b"}
	m := MpsPerDevicePinnedMemoryLimit{"1": mustQuantity("1Gi")}
	got, err := m.NormalizeLimits(uuids, ptrQuantity("10Gi"))
	if err != nil || got["GPU-a"] != "10240M" || got["GPU-b"] != "1024M" {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := (MpsPerDevicePinnedMemoryLimit{"7": mustQuantity("1Gi")}).NormalizeLimits(uuids, nil); err == nil {
		t.Fatal("index out of range")
	}
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

func ptrQuantity(s string) *resource.Quantity { q := resource.MustParse(s); return &q }
