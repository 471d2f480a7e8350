package smi

import (
	"os"
	"strings"
	"testing"
)

func TestComputeModeAndTimeSliceAreGPUState(t *testing.T) {
	env := container(t, map[string]int{"nvidia0": 0, "nvidia1": 1}, true)
	const a = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
	out, _, code := run(env, "--query-gpu=uuid,compute_mode", "--format=csv,noheader")
	if code != ExitOK || !strings.Contains(out, a+", Default") {
		t.Fatalf("a GPU never set is in Default compute mode: %d %q", code, out)
	}
	// What upstream's plugin runs for an MPS claim, then for a TimeSlicing claim.
	if out, _, code = run(env, "-i", a, "-c", "EXCLUSIVE_PROCESS"); code != ExitOK ||
		!strings.Contains(out, "Set compute mode to EXCLUSIVE_PROCESS for GPU 00000000:18:00.0.") {
		t.Fatalf("-c EXCLUSIVE_PROCESS: %d %q", code, out)
	}
	out, _, _ = run(env, "--query-gpu=uuid,compute_mode", "--format=csv,noheader")
	if !strings.Contains(out, a+", Exclusive_Process") || !strings.Contains(out, "GPU-bbbbbbbb-1111-1111-1111-111111111111, Default") {
		t.Fatalf("only the selected GPU changes: %q", out)
	}
	if out, _, code = run(env, "compute-policy", "-i", a, "--set-timeslice", "3"); code != ExitOK {
		t.Fatalf("--set-timeslice 3: %d %q", code, out)
	}
	out, _, code = run(env, "compute-policy", "-l")
	if code != ExitOK || !strings.Contains(out, a+"   Long") || !strings.Contains(out, "GPU-bbbbbbbb-1111-1111-1111-111111111111   Default") {
		t.Fatalf("compute-policy -l: %d %q", code, out)
	}
	if _, _, code = run(env, "compute-policy", "--set-timeslice=4"); code != ExitInvalidArgs {
		t.Fatalf("level 4 does not exist: %d", code)
	}
	if _, _, code = run(env, "-c", "SHARED"); code != ExitInvalidArgs {
		t.Fatalf("unknown compute mode: %d", code)
	}
}

func TestSettingStateNeedsAWritableStateDir(t *testing.T) {
	env := container(t, map[string]int{"nvidia0": 0}, true)
	// A container's view: the directory exists (mounted) but cannot be written.
	os.MkdirAll(env.StateDir, 0o755)
	os.Chmod(env.StateDir, 0o555)
	defer os.Chmod(env.StateDir, 0o755)
	if os.Geteuid() == 0 {
		t.Skip("root writes through file modes")
	}
	out, _, code := run(env, "-c", "DEFAULT")
	if code != ExitOK {
		t.Fatalf("a mode already set is no write: %d %q", code, out)
	}
	out, _, code = run(env, "-c", "3")
	if code != ExitNoPermission || !strings.Contains(out, "Insufficient Permissions") {
		t.Fatalf("read-only state: %d %q", code, out)
	}
}
