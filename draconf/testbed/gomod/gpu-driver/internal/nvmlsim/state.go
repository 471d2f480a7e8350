package nvmlsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// StateRelDir is where the simulated GPUs keep their mutable state below a driver root: what
// the real GPU holds in the kernel driver until reset (compute mode, the time-slice compute
// policy), one file <UUID>.json per GPU.  The plugin changes it the way upstream does, by
// running nvidia-smi (-c, compute-policy --set-timeslice) against the driver root; the CDI
// spec mounts the directory read-only into containers, where nvidia-smi reports it.
const StateRelDir = "run/nvidia-sim/gpus"

// Compute modes as nvidia-smi names them for -c and prints them for --query-gpu=compute_mode.
const (
	ComputeModeDefault          = "Default"
	ComputeModeExclusiveProcess = "Exclusive_Process"
	ComputeModeProhibited       = "Prohibited"
)

// TimeSliceNames are the compute-policy time-slice levels 0..3 (nvidia-smi compute-policy
// --set-timeslice: 0=DEFAULT, 1=SHORT, 2=MEDIUM, 3=LONG).
var TimeSliceNames = []string{"Default", "Short", "Medium", "Long"}

// GPUState is one GPU's mutable state; the zero value is a GPU after reset.
type GPUState struct {
	ComputeMode string `json:"computeMode,omitempty"`
	TimeSlice   int    `json:"timeSlice,omitempty"`
}

// Mode is the compute mode, Default when never set.
func (s GPUState) Mode() string {
	if s.ComputeMode == "" {
		return ComputeModeDefault
	}
	return s.ComputeMode
}

// TimeSliceName is the time-slice level's name.
func (s GPUState) TimeSliceName() string {
	if s.TimeSlice >= 0 && s.TimeSlice < len(TimeSliceNames) {
		return TimeSliceNames[s.TimeSlice]
	}
	return "Unknown"
}

// StateDir is the state directory below root.
func StateDir(root string) string { return filepath.Join(root, StateRelDir) }

// LoadState reads a GPU's state from dir; a missing file is a GPU after reset.
func LoadState(dir, uuid string) (GPUState, error) {
	var s GPUState
	raw, err := os.ReadFile(filepath.Join(dir, uuid+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return s, fmt.Errorf("parse state of %s: %w", uuid, err)
	}
	return s, nil
}

// SaveState writes a GPU's state to dir (atomically: readers never see half a file).
func SaveState(dir, uuid string, s GPUState) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+uuid+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, uuid+".json"))
}
