package smi

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const nvmlJSON = `{"driverVersion": "580.95.05", "cudaDriverVersion": "13.0", "gpus": [
 {"minor": 0, "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000", "productName": "NVIDIA H100 80GB HBM3", "brand": "Nvidia",
  "architecture": "Hopper", "cudaComputeCapability": "9.0", "pciBusID": "0000:18:00.0", "pcieRoot": "pci0000:17", "memoryBytes": 85520809984},
 {"minor": 1, "uuid": "GPU-bbbbbbbb-1111-1111-1111-111111111111", "productName": "NVIDIA H100 80GB HBM3", "brand": "Nvidia",
  "architecture": "Hopper", "cudaComputeCapability": "9.0", "pciBusID": "0000:28:00.0", "pcieRoot": "pci0000:27", "memoryBytes": 85520809984},
 {"minor": 2, "uuid": "GPU-cccccccc-2222-2222-2222-222222222222", "productName": "NVIDIA H100 80GB HBM3", "brand": "Nvidia",
  "architecture": "Hopper", "cudaComputeCapability": "9.0", "pciBusID": "0000:38:00.0", "pcieRoot": "pci0000:37", "memoryBytes": 85520809984}]}`

// container makes a container's view: nvml.json and device node files whose rdev is given by
// nodes (file name -> minor; a negative minor makes a regular file).
func container(t *testing.T, nodes map[string]int, withNVML bool) Env {
	t.Helper()
	root := t.TempDir()
	dev := filepath.Join(root, "dev")
	os.MkdirAll(dev, 0o755)
	rdev := map[string]int{}
	for name, minor := range nodes {
		p := filepath.Join(dev, name)
		os.WriteFile(p, nil, 0o644)
		rdev[p] = minor
	}
	nvml := filepath.Join(root, "usr/share/nvidia-sim/nvml.json")
	if withNVML {
		os.MkdirAll(filepath.Dir(nvml), 0o755)
		os.WriteFile(nvml, []byte(nvmlJSON), 0o644)
	}
	return Env{
		DevDir:   dev,
		NVMLPath: nvml,
		StateDir: filepath.Join(root, "run/nvidia-sim/gpus"),
		Stat: func(p string) (uint64, bool, error) {
			m, ok := rdev[p]
			if !ok || m < 0 {
				return 0, false, nil
			}
			return uint64(195<<8 | m), true, nil
		},
		Now: func() time.Time { return time.Date(2026, 11, 29, 3, 4, 5, 0, time.UTC) },
	}
}

func run(env Env, args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	code := Run(args, &out, &errOut, env)
	return out.String(), errOut.String(), code
}

func TestListUsesRdevAndPCIOrder(t *testing.T) {
	// The node named nvidia0 really is minor 2; nvidia7 is minor 0; nvidiactl and a regular
	// file named nvidia5 are not GPUs.
	env := container(t, map[string]int{"nvidia0": 2, "nvidia7": 0, "nvidiactl": 255, "nvidia5": -1, "nvidia-uvm": 3}, true)
	out, _, code := run(env, "-L")
	want := "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaaaaaa-0000-0000-0000-000000000000)\n" +
		"GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-cccccccc-2222-2222-2222-222222222222)\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if out2, _, _ := run(env, "--list-gpus"); out2 != want {
		t.Errorf("--list-gpus:\n%s", out2)
	}
}

func TestQueryFormats(t *testing.T) {
	env := container(t, map[string]int{"nvidia0": 0, "nvidia1": 1}, true)
	q := "--query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version"
	for format, want := range map[string]string{
		"csv": "index, name, uuid, pci.bus_id, memory.total [MiB], driver_version\n" +
			"0, NVIDIA H100 80GB HBM3, GPU-aaaaaaaa-0000-0000-0000-000000000000, 00000000:18:00.0, 81559 MiB, 580.95.05\n" +
			"1, NVIDIA H100 80GB HBM3, GPU-bbbbbbbb-1111-1111-1111-111111111111, 00000000:28:00.0, 81559 MiB, 580.95.05\n",
		"csv,noheader": "0, NVIDIA H100 80GB HBM3, GPU-aaaaaaaa-0000-0000-0000-000000000000, 00000000:18:00.0, 81559 MiB, 580.95.05\n" +
			"1, NVIDIA H100 80GB HBM3, GPU-bbbbbbbb-1111-1111-1111-111111111111, 00000000:28:00.0, 81559 MiB, 580.95.05\n",
		"csv,noheader,nounits": "0, NVIDIA H100 80GB HBM3, GPU-aaaaaaaa-0000-0000-0000-000000000000, 00000000:18:00.0, 81559, 580.95.05\n" +
			"1, NVIDIA H100 80GB HBM3, GPU-bbbbbbbb-1111-1111-1111-111111111111, 00000000:28:00.0, 81559, 580.95.05\n",
	} {
		out, _, code := run(env, q, "--format="+format)
		if code != 0 || out != want {
			t.Errorf("--format=%s: exit %d\n%s", format, code, out)
		}
	}
	// Separate-argument forms, aliases and -i.
	out, _, code := run(env, "--query-gpu", "gpu_name,count,compute_cap", "--format", "csv,noheader", "-i", "1")
	if code != 0 || out != "NVIDIA H100 80GB HBM3, 2, 9.0\n" { // count is every GPU
		t.Errorf("exit %d: %q", code, out)
	}
}

func TestQueryUnknownField(t *testing.T) {
	env := container(t, map[string]int{"nvidia0": 0}, true)
	out, errOut, code := run(env, "--query-gpu=name,bogus", "--format=csv")
	if code != 2 || out != "" || errOut != "Field \"bogus\" is not a valid field to query.\n" {
		t.Errorf("exit %d out %q err %q", code, out, errOut)
	}
	if _, _, code := run(env, "--frobnicate"); code != 2 {
		t.Errorf("unknown option: exit %d", code)
	}
	if _, _, code := run(env, "--query-gpu=name", "--format=xml"); code != 2 {
		t.Errorf("bad format: exit %d", code)
	}
}

func TestNoDevicesAndNoDriver(t *testing.T) {
	out, _, code := run(container(t, map[string]int{"nvidiactl": 255}, true), "-L")
	if code != 6 || out != "No devices were found\n" {
		t.Errorf("no devices: exit %d %q", code, out)
	}
	// A node whose minor NVML does not know is no GPU either.
	if _, _, code := run(container(t, map[string]int{"nvidia9": 9}, true), "-L"); code != 6 {
		t.Errorf("unknown minor: exit %d", code)
	}
	out, _, code = run(container(t, map[string]int{"nvidia0": 0}, false), "-L")
	if code != 9 || !strings.HasPrefix(out, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.") {
		t.Errorf("no driver: exit %d %q", code, out)
	}
}

func TestSummary(t *testing.T) {
	env := container(t, map[string]int{"nvidia0": 0, "nvidia1": 1}, true)
	out, _, code := run(env)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if lines[0] != "Sun Nov 29 03:04:05 2026       " {
		t.Errorf("date line %q", lines[0])
	}
	for _, l := range lines[1:] {
		if l != "" && len(l) != 91 {
			t.Errorf("line of %d columns: %q", len(l), l)
		}
	}
	for _, want := range []string{
		"| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |",
		"|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |",
		"|   1  NVIDIA H100 80GB HBM3          On  |   00000000:28:00.0 Off |                    0 |",
		"|       0MiB /  81559MiB |",
		"No running processes found",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

func TestVersion(t *testing.T) {
	out, _, code := run(container(t, nil, true), "--version")
	if code != 0 || !strings.Contains(out, "DRIVER version      : 580.95.05") || !strings.Contains(out, "CUDA Version        : 13.0") {
		t.Errorf("exit %d\n%s", code, out)
	}
}
