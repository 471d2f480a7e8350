package smi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"draconf.local/testbed/gpu-driver/internal/nvmlsim"
)

// A container given MIG device 1g.10gb at placement 2 of GPU 1 (GPU instance 2): the parent's
// device node and the two capability nodes.  nvidia-smi -L lists the parent, then the MIG
// device under it, as the real one does.
func TestListMigUnderParent(t *testing.T) {
	root := t.TempDir()
	data := nvmlsim.Data{DriverVersion: "580.95.05", CudaDriverVersion: "13.0"}
	if err := json.Unmarshal([]byte(nvmlJSON), &data); err != nil {
		t.Fatal(err)
	}
	for i := range data.GPUs {
		data.GPUs[i].MIG = &nvmlsim.MIG{MemorySlices: 8, Profiles: []nvmlsim.MigProfile{
			{Name: "1g.10gb", ID: 19, Size: 1, Placements: []int{0, 1, 2, 3, 4, 5, 6}}}}
	}
	raw, _ := json.Marshal(data)
	nvml := filepath.Join(root, "nvml.json")
	os.WriteFile(nvml, raw, 0o644)
	dev := filepath.Join(root, "dev")
	os.MkdirAll(filepath.Join(dev, "nvidia-caps"), 0o755)
	rdev := map[string]uint64{}
	add := func(rel string, major, minor int) {
		p := filepath.Join(dev, rel)
		os.WriteFile(p, nil, 0o644)
		rdev[p] = uint64(major<<8 | minor)
	}
	add("nvidia1", 195, 1)
	add("nvidia-caps/nvidia-cap"+itoa(nvmlsim.GIAccessMinor(1, 2)), nvmlsim.NvidiaCapsMajor, nvmlsim.GIAccessMinor(1, 2))
	add("nvidia-caps/nvidia-cap"+itoa(nvmlsim.CIAccessMinor(1, 2, 0)), nvmlsim.NvidiaCapsMajor, nvmlsim.CIAccessMinor(1, 2, 0))
	// GPU instance 3's access without its compute instance's: not usable, not listed.
	add("nvidia-caps/nvidia-cap"+itoa(nvmlsim.GIAccessMinor(1, 3)), nvmlsim.NvidiaCapsMajor, nvmlsim.GIAccessMinor(1, 3))
	env := Env{DevDir: dev, NVMLPath: nvml, Stat: func(p string) (uint64, bool, error) {
		r, ok := rdev[p]
		return r, ok, nil
	}}
	out, _, code := run(env, "-L")
	want := "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbbbbbb-1111-1111-1111-111111111111)\n" +
		"  MIG 1g.10gb     Device  0: (UUID: " + nvmlsim.MigUUID("GPU-bbbbbbbb-1111-1111-1111-111111111111", 19, 2) + ")\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d\n%q\nwant\n%q", code, out, want)
	}
}

func TestCapMinorsRoundTrip(t *testing.T) {
	for _, c := range [][3]int{{0, 0, -1}, {0, 14, 7}, {3, 2, 0}, {1, 0, -1}} {
		m := nvmlsim.GIAccessMinor(c[0], c[1])
		if c[2] >= 0 {
			m = nvmlsim.CIAccessMinor(c[0], c[1], c[2])
		}
		g, gi, ci, ok := nvmlsim.DecodeCapMinor(m)
		if !ok || g != c[0] || gi != c[1] || ci != c[2] {
			t.Errorf("%v -> %d -> %d %d %d", c, m, g, gi, ci)
		}
	}
	// As /proc/driver/nvidia-caps/mig-minors: gpu0/gi1/access 12, gpu1/gi0/access 138.
	if nvmlsim.GIAccessMinor(0, 1) != 12 || nvmlsim.GIAccessMinor(1, 0) != 138 {
		t.Error("minor numbering differs from mig-minors")
	}
}

func itoa(i int) string { return fmtInt(i) }

func fmtInt(i int) string { b, _ := json.Marshal(i); return string(b) }
