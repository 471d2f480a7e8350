package plugin

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"draconf.local/testbed/gpu-driver/internal/nvmlsim"
)

// h100MIG is a subset of an H100 80GB's GPU instance profiles (nvidia-smi mig -lgip).
var h100MIG = &nvmlsim.MIG{MemorySlices: 8, Profiles: []nvmlsim.MigProfile{
	{Name: "1g.10gb", ID: 19, MemoryMiB: 9984, Multiprocessors: 16, CopyEngines: 1, Decoders: 1, JpegEngines: 1, Size: 1,
		Placements: []int{0, 1, 2, 3, 4, 5, 6}},
	{Name: "3g.40gb", ID: 9, MemoryMiB: 40448, Multiprocessors: 60, CopyEngines: 3, Decoders: 3, JpegEngines: 3, Size: 4,
		Placements: []int{0, 4}},
	{Name: "7g.80gb", ID: 0, MemoryMiB: 81152, Multiprocessors: 132, CopyEngines: 8, Decoders: 7, JpegEngines: 7, OfaEngines: 1,
		Size: 8, Placements: []int{0}},
}}

func newMigBed(t *testing.T, n int, faults ...Fault) *bed {
	t.Helper()
	fs := Faults{}
	for _, f := range faults {
		fs[f] = true
	}
	cfg := &Config{
		NodeName:       testNode,
		HostDriverRoot: hostDriverRoot,
		ContainerDriverRoot: driverRoot(t, n, func(d *nvmlsim.Data) {
			for i := range d.GPUs {
				d.GPUs[i].MIG = h100MIG
			}
		}),
		CDIRoot:                     filepath.Join(t.TempDir(), "cdi"),
		KubeletPluginsDirectoryPath: t.TempDir(),
		Faults:                      fs,
		DynamicMIG:                  true,
	}
	// The capability nodes the bed lays out for every GPU instance of a MIG-capable GPU.
	for g := 0; g < n; g++ {
		for gi := 0; gi < nvmlsim.MaxGpuInstances; gi++ {
			for _, m := range []int{nvmlsim.GIAccessMinor(g, gi), nvmlsim.CIAccessMinor(g, gi, 0)} {
				p := filepath.Join(cfg.ContainerDriverRoot, nvmlsim.CapsDir, "nvidia-cap"+strconv.Itoa(m))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	b := reopen(t, cfg)
	b.lib.dynamicMIG = true
	return b
}

func TestMigSplitSlices(t *testing.T) {
	b := newMigBed(t, 2)
	pool := b.lib.DriverResources(testNode, b.cfg.Faults).Pools[testNode]
	if len(pool.Slices) != 3 {
		t.Fatalf("want 3 slices (counters, then one per GPU), got %d", len(pool.Slices))
	}
	counters := pool.Slices[0]
	if len(counters.Devices) != 0 || len(counters.SharedCounters) != 2 || counters.SharedCounters[0].Name != "gpu-0-counter-set" {
		t.Fatalf("first slice must hold only the counter sets: %+v", counters)
	}
	set := counters.SharedCounters[0].Counters
	for _, c := range []string{"multiprocessors", "copy-engines", "decoders", "encoders", "jpeg-engines", "ofa-engines",
		"memory", "memory-slice-0", "memory-slice-7"} {
		if _, ok := set[c]; !ok {
			t.Errorf("counter set lacks %s: %v", c, set)
		}
	}
	if q := set["multiprocessors"].Value; q.Value() != 132 {
		t.Errorf("multiprocessors counter: %v", q.String())
	}
	devs := pool.Slices[1].Devices
	if len(devs) != 1+7+2+1 || len(pool.Slices[1].SharedCounters) != 0 {
		t.Fatalf("GPU slice: %d devices", len(devs))
	}
	if devs[0].Name != "gpu-0" || devs[1].Name != "gpu-0-mig-1g10gb-19-0" {
		t.Errorf("names sorted, full GPU first: %s, %s", devs[0].Name, devs[1].Name)
	}
	full := devs[0]
	if len(full.ConsumesCounters) != 1 || len(full.ConsumesCounters[0].Counters) != 15 {
		t.Errorf("the full GPU consumes its whole counter set: %+v", full.ConsumesCounters)
	}
	mig := devs[1]
	if *mig.Attributes["type"].StringValue != "mig" || *mig.Attributes["profile"].StringValue != "1g.10gb" ||
		*mig.Attributes["parentUUID"].StringValue != testUUIDs[0] {
		t.Errorf("MIG attributes: %+v", mig.Attributes)
	}
	if _, ok := mig.Attributes["uuid"]; ok {
		t.Errorf("a possible MIG device has no uuid yet")
	}
	cc := mig.ConsumesCounters[0]
	if cc.CounterSet != "gpu-0-counter-set" || len(cc.Counters) != 8 {
		t.Errorf("1g.10gb at 0 consumes 7 capacities and memory-slice-0: %+v", cc)
	}
	if _, ok := cc.Counters["memory-slice-0"]; !ok {
		t.Errorf("memory-slice-0 missing: %v", cc.Counters)
	}
	if m := mig.Capacity["memory"].Value; m.Value() != 9984*1024*1024 {
		t.Errorf("MIG memory capacity: %s", m.String())
	}
}

func TestMigCountersIgnoredFault(t *testing.T) {
	b := newMigBed(t, 1, FaultMigCountersIgnored)
	pool := b.lib.DriverResources(testNode, b.cfg.Faults).Pools[testNode]
	for _, d := range pool.Slices[1].Devices {
		if d.Name != "gpu-0" && len(d.ConsumesCounters) != 0 {
			t.Errorf("%s still consumes counters", d.Name)
		}
	}
}

func TestMigUnpublishedFault(t *testing.T) {
	b := newMigBed(t, 2, FaultMigUnpublished)
	pool := b.lib.DriverResources(testNode, b.cfg.Faults).Pools[testNode]
	if len(pool.Slices[0].SharedCounters) != 2 {
		t.Errorf("the GPUs' counter sets are gone: %v", pool.Slices[0].SharedCounters)
	}
	for g, s := range pool.Slices[1:] {
		if len(s.Devices) != 1 || s.Devices[0].Name != "gpu-"+itoa(g) || len(s.Devices[0].ConsumesCounters) == 0 {
			t.Errorf("slice %d: want the whole GPU alone, consuming its counter set; got %d device(s)", g, len(s.Devices))
		}
	}
}

func TestMigParentMislabelledFault(t *testing.T) {
	b := newMigBed(t, 3, FaultMigParentMislabelled)
	pool := b.lib.DriverResources(testNode, b.cfg.Faults).Pools[testNode]
	for g, s := range pool.Slices[1:] {
		for _, d := range s.Devices {
			if d.Name == "gpu-"+itoa(g) {
				continue
			}
			// 1g.10gb takes one memory slice: published under its own GPU; the larger profiles
			// under the next GPU, wrapping from the last to the first.
			want := testUUIDs[g]
			if !strings.Contains(d.Name, "-mig-1g10gb-") {
				want = testUUIDs[(g+1)%3]
			}
			if got := *d.Attributes["parentUUID"].StringValue; got != want {
				t.Errorf("%s: parentUUID %s, want %s", d.Name, got, want)
			}
			// What the scheduler's counters and the node know stays the real GPU's.
			if cs := d.ConsumesCounters[0].CounterSet; cs != "gpu-"+itoa(g)+"-counter-set" {
				t.Errorf("%s consumes %s", d.Name, cs)
			}
		}
	}
	if _, err := b.prep.Prepare(claim("m1", "gpu-0-mig-3g40gb-9-4")); err != nil {
		t.Fatal(err)
	}
	if n := readSpec(t, b, "m1").Devices[0].ContainerEdits.DeviceNodes[0].Path; n != "/dev/nvidia0" {
		t.Errorf("a mislabelled MIG device is still created on its real GPU: %s", n)
	}
	// A single MIG-capable GPU has no other GPU to name.
	one := newMigBed(t, 1, FaultMigParentMislabelled)
	for _, d := range one.lib.DriverResources(testNode, one.cfg.Faults).Pools[testNode].Slices[1].Devices[1:] {
		if got := *d.Attributes["parentUUID"].StringValue; got != testUUIDs[0] {
			t.Errorf("one GPU: %s published under %s", d.Name, got)
		}
	}
}

func TestWithoutDynamicMIGNothingChanges(t *testing.T) {
	b := newMigBed(t, 2)
	b.lib.dynamicMIG, b.lib.migs = false, nil
	pool := b.lib.DriverResources(testNode, b.cfg.Faults).Pools[testNode]
	if len(pool.Slices) != 1 || len(pool.Slices[0].Devices) != 2 || pool.Slices[0].Devices[0].ConsumesCounters != nil {
		t.Fatalf("gate off: one slice of full GPUs: %+v", pool.Slices)
	}
}

func TestPrepareMigDevice(t *testing.T) {
	b := newMigBed(t, 2)
	devs, err := b.prep.Prepare(claim("m1", "gpu-1-mig-3g40gb-9-4"))
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0].CDIDeviceIDs[0] != "k8s.gpu.nvidia.com/claim=m1-gpu-1-mig-3g40gb-9-4" {
		t.Fatalf("devices: %+v", devs)
	}
	spec := readSpec(t, b, "m1")
	var paths []string
	for _, n := range spec.Devices[0].ContainerEdits.DeviceNodes {
		paths = append(paths, n.Path)
	}
	// 3g.40gb at 4 is the 9th slot (7 x 1g.10gb, then 3g.40gb at 0, at 4): GPU instance 8.
	gi := 8
	want := []string{"/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap" + itoa(nvmlsim.GIAccessMinor(1, gi)),
		"/dev/nvidia-caps/nvidia-cap" + itoa(nvmlsim.CIAccessMinor(1, gi, 0))}
	if strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Errorf("device nodes %v, want %v", paths, want)
	}
	uuid := nvmlsim.MigUUID(testUUIDs[1], 9, 4)
	if !strings.Contains(strings.Join(spec.ContainerEdits.Env, " "), "NVIDIA_VISIBLE_DEVICES="+uuid) {
		t.Errorf("env: %v", spec.ContainerEdits.Env)
	}
}

func TestPrepareMigConflicts(t *testing.T) {
	b := newMigBed(t, 1)
	if _, err := b.prep.Prepare(claim("full", "gpu-0")); err != nil {
		t.Fatal(err)
	}
	_, err := b.prep.Prepare(claim("mig", "gpu-0-mig-1g10gb-19-3"))
	if err == nil || !strings.Contains(err.Error(), "Insufficient Resources") {
		t.Fatalf("a MIG device on a GPU in full use: %v", err)
	}
	if _, _, err := b.prep.Unprepare(ref("full")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.prep.Prepare(claim("mig", "gpu-0-mig-3g40gb-9-0")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.prep.Prepare(claim("mig2", "gpu-0-mig-1g10gb-19-3")); err == nil {
		t.Fatalf("memory slice 3 is in use by 3g.40gb at 0")
	}
	if _, err := b.prep.Prepare(claim("mig3", "gpu-0-mig-1g10gb-19-4")); err != nil {
		t.Fatalf("slice 4 is free: %v", err)
	}
	if _, err := b.prep.Prepare(claim("full2", "gpu-0")); err == nil || !strings.Contains(err.Error(), "MIG use") {
		t.Fatalf("the full GPU while MIG devices exist: %v", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestPreparedMigClaimGetsItsSpecBack(t *testing.T) {
	b := newMigBed(t, 1)
	c := claim("m1", "gpu-0-mig-3g40gb-9-4", "gpu-0-mig-1g10gb-19-0")
	first, err := b.prep.Prepare(c)
	if err != nil {
		t.Fatal(err)
	}
	before := readSpec(t, b, "m1")
	if err := os.Remove(b.cdi.SpecPath("m1")); err != nil {
		t.Fatal(err)
	}
	again, err := reopen(t, b.cfg).prep.Prepare(c) // a restarted plugin, /var/run emptied
	if err != nil {
		t.Fatal(err)
	}
	after := readSpec(t, b, "m1")
	if len(first) != 2 || len(again) != 2 || len(after.Devices) != 2 ||
		strings.Join(after.ContainerEdits.Env, " ") != strings.Join(before.ContainerEdits.Env, " ") {
		t.Fatalf("spec not rewritten as before:\n%+v\n%+v", before, after)
	}
}

// Counter and device names are DNS names made from capacity and profile names.
func TestDNSNames(t *testing.T) {
	for in, want := range map[string]string{
		"copyEngines": "copy-engines", "multiprocessors": "multiprocessors", "HTTPServer": "http-server",
		"gpu3Memory": "gpu3-memory",
	} {
		if got := dnsName(splitCamel(in)); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"1g10gb+me": "1g10gb-me", "-x.y.": "x.y", "A_B": "a-b"} {
		if got := dnsName(in); got != want {
			t.Errorf("dnsName(%q) = %q, want %q", in, got, want)
		}
	}
}
