package nvmlsim

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, root, content string) {
	t.Helper()
	p := Path(root)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadSortsByPCIBusID(t *testing.T) {
	root := t.TempDir()
	write(t, root, `{"driverVersion": "580.95.05", "cudaDriverVersion": "13.0", "gpus": [
	  {"minor": 1, "uuid": "GPU-b", "pciBusID": "0000:28:00.0", "memoryBytes": 1},
	  {"minor": 0, "uuid": "GPU-a", "pciBusID": "0000:18:00.0", "memoryBytes": 1}]}`)
	d, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	if d.GPUs[0].UUID != "GPU-a" || d.GPUs[1].UUID != "GPU-b" {
		t.Fatalf("not in PCI order: %+v", d.GPUs)
	}
	if g, ok := d.ByMinor(1); !ok || g.UUID != "GPU-b" {
		t.Fatalf("ByMinor(1) = %+v, %v", g, ok)
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(t.TempDir()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing file: %v", err)
	}
	for name, doc := range map[string]string{
		"duplicate minor": `{"driverVersion": "1", "cudaDriverVersion": "1", "gpus": [{"minor": 0, "uuid": "GPU-a", "pciBusID": "0000:18:00.0"}, {"minor": 0, "uuid": "GPU-b", "pciBusID": "0000:28:00.0"}]}`,
		"bad uuid":        `{"driverVersion": "1", "cudaDriverVersion": "1", "gpus": [{"minor": 0, "uuid": "x", "pciBusID": "0000:18:00.0"}]}`,
		"no driver":       `{"cudaDriverVersion": "1", "gpus": [{"minor": 0, "uuid": "GPU-a", "pciBusID": "0000:18:00.0"}]}`,
		"not json":        `{`,
	} {
		root := t.TempDir()
		write(t, root, doc)
		if _, err := Load(root); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestLoadNoGPUs(t *testing.T) {
	root := t.TempDir()
	write(t, root, `{"driverVersion": "", "cudaDriverVersion": "", "gpus": []}`)
	if d, err := Load(root); err != nil || len(d.GPUs) != 0 {
		t.Fatalf("%+v %v", d, err)
	}
}

func TestFormats(t *testing.T) {
	if got := BusIDLong("0000:1a:00.0"); got != "00000000:1A:00.0" {
		t.Errorf("BusIDLong = %q", got)
	}
	for in, want := range map[string]string{"13.0": "13.0", "13.0.0": "13.0", "12.08": "12.8", "13": "13.0"} {
		if got := (&Data{CudaDriverVersion: in}).CudaMajorMinor(); got != want {
			t.Errorf("CudaMajorMinor(%q) = %q, want %q", in, got, want)
		}
	}
	// makedev(195, 3) and makedev(195, 255); a large minor uses the high bits.
	for _, c := range []struct {
		dev          uint64
		major, minor int
	}{
		{195<<8 | 3, 195, 3}, {195<<8 | 255, 195, 255}, {(195 << 8) | (0x12 << 12 << 8) | 0x34, 195, 0x1234},
	} {
		if DevMajor(c.dev) != c.major || DevMinor(c.dev) != c.minor {
			t.Errorf("dev %#x: got %d:%d, want %d:%d", c.dev, DevMajor(c.dev), DevMinor(c.dev), c.major, c.minor)
		}
	}
}
