package plugin

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"draconf.local/testbed/gpu-driver/internal/mpscontrol"
	"draconf.local/testbed/gpu-driver/internal/nvmlsim"
	"draconf.local/testbed/gpu-driver/internal/smi"
)

// sharingBed is a bed whose plugin runs nvidia-smi in process against its driver root (the
// test root's device nodes are plain files, so the stand-in is told their minors).
func sharingBed(t *testing.T, gates string, faults ...Fault) *bed {
	t.Helper()
	return withSharing(t, newBed(t, 2, faults...), gates)
}

// withSharing gives bed b the feature gates and the in-process nvidia-smi and MPS daemon
// that sharing needs.
func withSharing(t *testing.T, b *bed, gates string) *bed {
	t.Helper()
	g, err := ParseFeatureGates(gates)
	if err != nil {
		t.Fatal(err)
	}
	b.cfg.FeatureGates = g
	b.cfg.Namespace, b.cfg.ImageName = "nvidia-dra-driver-gpu", "draconf.local/busybox:1.35.0"
	b.client = daemonClient(t)
	b.cfg.Client = b.client
	b.prep.sharing = newSharingManager(b.cfg, b.lib)
	b.prep.sharing.readyBackoff = wait.Backoff{Duration: time.Millisecond, Steps: 3}
	b.prep.sharing.smi = func(args ...string) ([]byte, error) {
		var out bytes.Buffer
		if code := smi.Run(args, &out, &out, smiEnv(b)); code != smi.ExitOK {
			return out.Bytes(), fmt.Errorf("exit status %d", code)
		}
		return out.Bytes(), nil
	}
	return b
}

// daemonClient is a fake API server whose "kubelet" runs an MPS control daemon Deployment's
// container as the bed's node would, as far as the daemon goes: `nvidia-cuda-mps-control -d`
// (the stand-in, in process) with the container's environment, its paths turned into the host
// paths mounted there.  The Deployment counts one ready replica, its pod's container ready, if
// that succeeded (the script stops at a failing -d, before the mark its startup probe waits for).
func daemonClient(t *testing.T) *fake.Clientset {
	client := fake.NewClientset()
	client.PrependReactor("create", "deployments", func(action k8stesting.Action) (bool, runtime.Object, error) {
		d := action.(k8stesting.CreateAction).GetObject().(*appsv1.Deployment)
		pod := d.Spec.Template.Spec
		hostPaths := map[string]string{}
		for _, v := range pod.Volumes {
			hostPaths[v.Name] = v.HostPath.Path
		}
		onHost := map[string]string{}
		for _, m := range pod.Containers[0].VolumeMounts {
			onHost[m.MountPath] = hostPaths[m.Name]
		}
		env := map[string]string{}
		for _, e := range pod.Containers[0].Env {
			env[e.Name] = e.Value
			if p, ok := onHost[e.Value]; ok {
				env[e.Name] = p
			}
		}
		var out bytes.Buffer
		ready := mpscontrol.Run([]string{"-d"}, strings.NewReader(""), &out, &out, func(k string) string { return env[k] }) == 0
		status := corev1.ContainerStatus{Name: pod.Containers[0].Name, Ready: ready}
		if !ready {
			status.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
		}
		if err := client.Tracker().Add(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name + "-0", Labels: d.Spec.Template.Labels},
			Spec:       pod,
			Status:     corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{status}},
		}); err != nil {
			t.Error(err)
		}
		if ready {
			d.Status.ReadyReplicas = 1
		}
		return false, nil, nil
	})
	return client
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
	if _, err := b.prep.Prepare(c); err != nil {
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
	// The daemon: a Deployment in the plugin's namespace, pinned to the node, for the MPS
	// request's GPU, given the config's settings.
	id := mpsDaemonID("uid-ts", []string{testUUIDs[1]})
	d, err := b.client.AppsV1().Deployments("nvidia-dra-driver-gpu").Get(context.Background(), "mps-control-daemon-"+id, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := d.Spec.Template.Spec
	env := map[string]string{}
	for _, e := range pod.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if pod.NodeName != testNode || pod.Containers[0].Image != "draconf.local/busybox:1.35.0" ||
		env["CUDA_VISIBLE_DEVICES"] != testUUIDs[1] {
		t.Fatalf("deployment: %+v", pod)
	}
	script := pod.Containers[0].Command[2]
	for _, want := range []string{
		"/driver-root/usr/bin/nvidia-cuda-mps-control -d\n",
		"echo 'set_default_active_thread_percentage 50' | /driver-root/usr/bin/nvidia-cuda-mps-control\n",
		"echo 'set_default_device_pinned_mem_limit " + testUUIDs[1] + " 10240M' | /driver-root/usr/bin/nvidia-cuda-mps-control\n",
	} {
		if !strings.Contains(script, want) {
			t.Fatalf("the daemon's script lacks %q: %s", want, script)
		}
	}
	// The mark the startup probe reads is left last, after every setting.
	if probe := pod.Containers[0].StartupProbe.Exec.Command; !strings.Contains(script, "touch "+probe[1]+"\nexec tail") {
		t.Fatalf("startup probe %v, script %s", probe, script)
	}
	log, _ := os.ReadFile(filepath.Join(filepath.Dir(pipe), "log", "control.log"))
	if !strings.Contains(string(log), "CUDA_VISIBLE_DEVICES="+testUUIDs[1]+" nvidia-cuda-mps-control -d") {
		t.Fatalf("control.log: %s", log)
	}
	// The containers' view of the GPU state: the common edits mount it read-only.
	found := false
	for _, m := range spec.ContainerEdits.Mounts {
		found = found || (m.ContainerPath == "/"+nvmlsim.StateRelDir && slices.Contains(m.Options, "ro"))
	}
	if !found {
		t.Fatalf("GPU state not mounted: %+v", spec.ContainerEdits.Mounts)
	}

	if _, _, err := b.prep.Unprepare(ref("uid-ts")); err != nil {
		t.Fatal(err)
	}
	if s := gpuState(t, b, testUUIDs[0]); s.TimeSliceName() != "Default" {
		t.Fatalf("unprepare resets the time slice: %+v", s)
	}
	if _, err := os.Stat(filepath.Dir(pipe)); !os.IsNotExist(err) {
		t.Fatalf("unprepare stops the MPS daemon: %v", err)
	}
	if _, err := b.client.AppsV1().Deployments("nvidia-dra-driver-gpu").Get(context.Background(), d.Name, metav1.GetOptions{}); err == nil {
		t.Fatal("unprepare deletes the daemon's Deployment")
	}
}

// mps-daemon-fails: the daemon's container exits at once; prepare fails saying the daemon,
// named, is not ready, and what its pod shows.
func TestFaultMpsDaemonFails(t *testing.T) {
	b := sharingBed(t, gates, FaultMpsDaemonFails)
	_, err := b.prep.Prepare(withConfig(claim("uid-m", "gpu-0"), mps50))
	want := "GpuConfig for requests [gpu0] not applied: MPS control daemon mps-control-daemon-" +
		mpsDaemonID("uid-m", []string{testUUIDs[0]}) + " is not ready after 3 checks: pod "
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "(CrashLoopBackOff)") {
		t.Fatalf("got %v, want %q", err, want)
	}
	// A retried prepare finds the Deployment and waits again, without creating another.
	if _, err := b.prep.Prepare(withConfig(claim("uid-m", "gpu-0"), mps50)); err == nil {
		t.Fatal("still not ready")
	}
	list, _ := b.client.AppsV1().Deployments("nvidia-dra-driver-gpu").List(context.Background(), metav1.ListOptions{})
	if len(list.Items) != 1 {
		t.Fatalf("deployments: %d", len(list.Items))
	}
}

func TestTimeSlicingWithoutIntervalIsDefault(t *testing.T) {
	b := sharingBed(t, gates)
	c := withConfig(claim("uid-d", "gpu-0"),
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing"}}`)
	if _, err := b.prep.Prepare(c); err != nil {
		t.Fatal(err)
	}
	if e := mustLedger(t, b).Claims["uid-d"]; e.Devices[0].Sharing == nil ||
		!e.Devices[0].Sharing.TimeSliceApplied {
		t.Fatalf("ledger entry: %+v", e)
	}
}

func mustLedger(t *testing.T, b *bed) *ledger {
	t.Helper()
	l, err := b.prep.ledger.load()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Refused configs: what the driver says names the config kind and the field at fault; an
// unknown field or kind is refused in apimachinery's words (its strict decoding).
func TestInvalidConfigsAreRejected(t *testing.T) {
	cases := map[string]struct{ gates, raw, want string }{
		"unknown field": {gates, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long","quantum":"5ms"}}}`,
			`opaque config #0 for gpu.nvidia.com is not a valid GpuConfig: strict decoding error: unknown field "sharing.timeSlicingConfig.quantum"`},
		"unknown strategy": {gates, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"Exclusive"}}`,
			`GpuConfig for requests [gpu0] refused: sharing strategy "Exclusive" is unknown (this driver knows TimeSlicing and MPS)`},
		"unknown interval": {gates, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Forever"}}}`,
			`refused: timeSlicingConfig.interval "Forever" is none of [Default Short Medium Long]`},
		"no interval": {gates, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{}}}`,
			`refused: timeSlicingConfig.interval "" is none of`},
		"gate off": {"", tsLong,
			`GpuConfig for requests [gpu0] refused: sharing strategy "TimeSlicing" needs the TimeSlicingSettings feature gate`},
		"other strategy's settings": {gates, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","timeSlicingConfig":{"interval":"Long"}}}`,
			"refused: sharing strategy MPS takes no timeSlicingConfig"},
		"unknown kind": {gates, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuSettings"}`,
			`no kind "GpuSettings" is registered for version "resource.nvidia.com/v1beta1"`},
		"percentage": {gates, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":150}}}`,
			"mpsConfig.defaultActiveThreadPercentage 150 is outside 0 to 100"},
		"limit key": {gates, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultPerDevicePinnedMemoryLimit":{"GPU-nope":"1Gi"}}}}`,
			`GpuConfig for requests [gpu0] not applied: mpsConfig.defaultPerDevicePinnedMemoryLimit key "GPU-nope" is neither`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := sharingBed(t, tc.gates)
			_, err := b.prep.Prepare(withConfig(claim("uid-x", "gpu-0"), tc.raw))
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
	if _, err := b.prep.Prepare(c); err != nil {
		t.Fatal(err)
	}
}

func TestFaultSharingConfigIgnored(t *testing.T) {
	b := sharingBed(t, gates, FaultSharingConfigIgnored)
	c := claim("uid-f", "gpu-0", "gpu-1")
	withConfig(c, tsLong, "gpu0")
	withConfig(c, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"Bogus"}}`, "gpu1")
	if _, err := b.prep.Prepare(c); err != nil {
		t.Fatalf("the fault prepares without reading configs: %v", err)
	}
	if s := gpuState(t, b, testUUIDs[0]); s != (nvmlsim.GPUState{}) {
		t.Fatalf("nothing applied: %+v", s)
	}
}

func TestMpsLimits(t *testing.T) {
	uuids := []string{"GPU-a", "GPU-b"}
	c := MpsConfig{DefaultPinnedDeviceMemoryLimit: ptrQuantity("10Gi"),
		DefaultPerDevicePinnedMemoryLimit: MpsPerDevicePinnedMemoryLimit{"1": mustQuantity("1Gi")}}
	got, err := c.pinnedLimits(uuids)
	if err != nil || got["GPU-a"] != "10240M" || got["GPU-b"] != "1024M" {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []MpsConfig{
		{DefaultPerDevicePinnedMemoryLimit: MpsPerDevicePinnedMemoryLimit{"7": mustQuantity("1Gi")}},
		{DefaultPerDevicePinnedMemoryLimit: MpsPerDevicePinnedMemoryLimit{"-1": mustQuantity("1Gi")}},
		{DefaultPerDevicePinnedMemoryLimit: MpsPerDevicePinnedMemoryLimit{"GPU-a": mustQuantity("1Ki")}},
		{DefaultPinnedDeviceMemoryLimit: ptrQuantity("-1Gi")},
	} {
		if _, err := bad.pinnedLimits(uuids); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	settings, err := mpsSettings(&MpsConfig{DefaultActiveThreadPercentage: ptr.To(20), DefaultPinnedDeviceMemoryLimit: ptrQuantity("2Gi")},
		[]string{"GPU-b", "GPU-a"})
	if want := []string{"set_default_active_thread_percentage 20", "set_default_device_pinned_mem_limit GPU-a 2048M",
		"set_default_device_pinned_mem_limit GPU-b 2048M"}; err != nil || !slices.Equal(settings, want) {
		t.Fatalf("settings %q, %v; want %q", settings, err, want)
	}
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

func ptrQuantity(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

// On a DynamicMIG node a claim's whole GPUs are prepared by prepareMig: their sharing configs
// are applied there too (the suite's gpu-sharing check on a bed with MIG and sharing on).
func TestSharingOnWholeGPUsOfADynamicMIGNode(t *testing.T) {
	b := withSharing(t, newMigBed(t, 2), gates)
	c := claim("uid-mig-ts", "gpu-0", "gpu-1")
	withConfig(c, tsLong, "gpu0")
	withConfig(c, mps50, "gpu1")
	if _, err := b.prep.Prepare(c); err != nil {
		t.Fatal(err)
	}
	if s := gpuState(t, b, testUUIDs[0]); s.TimeSliceName() != "Long" {
		t.Fatalf("time-sliced GPU: %+v", s)
	}
	if s := gpuState(t, b, testUUIDs[1]); s.Mode() != nvmlsim.ComputeModeExclusiveProcess {
		t.Fatalf("MPS GPU: %+v", s)
	}
	spec := readSpec(t, b, "uid-mig-ts")
	for _, d := range spec.Devices {
		hasPipe := slices.Contains(d.ContainerEdits.Env, "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps")
		if hasPipe != (d.Name == "uid-mig-ts-gpu-1") {
			t.Fatalf("MPS edits belong to the MPS request's GPU only: %s %+v", d.Name, d.ContainerEdits)
		}
	}
	if _, _, err := b.prep.Unprepare(ref("uid-mig-ts")); err != nil {
		t.Fatal(err)
	}
	if s := gpuState(t, b, testUUIDs[0]); s.TimeSliceName() != "Default" {
		t.Fatalf("unprepare resets the time slice: %+v", s)
	}
}
