package nvmlsim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// MIG is what NVML reports about a MIG-capable GPU: its memory slice count and the GPU
// instance profiles with their possible placements (nvmlDeviceGetGpuInstanceProfileInfo and
// nvmlDeviceGetGpuInstancePossiblePlacements, which upstream's DynamicMIG discovery walks).
// nil (the default) is a GPU without MIG support, or with DynamicMIG not applicable.
type MIG struct {
	// MemorySlices is the GPU's memory slice count (8 on an H100).
	MemorySlices int          `json:"memorySlices"`
	Profiles     []MigProfile `json:"profiles"`
}

// MigProfile is one GPU instance profile (one row of `nvidia-smi mig -lgip`), its compute
// instance spanning the whole GPU instance (upstream publishes only those: C == G).
type MigProfile struct {
	// Name as nvidia-smi and go-nvlib print it, e.g. "1g.10gb".
	Name string `json:"name"`
	// ID is the GPU instance profile id (e.g. 19 for 1g.10gb on an H100).
	ID int `json:"id"`
	// MemoryMiB is nvmlGpuInstanceProfileInfo_t.memorySizeMB (MiB, despite the name).
	MemoryMiB       int `json:"memoryMiB"`
	Multiprocessors int `json:"multiprocessors"`
	CopyEngines     int `json:"copyEngines"`
	Decoders        int `json:"decoders"`
	Encoders        int `json:"encoders"`
	JpegEngines     int `json:"jpegEngines"`
	OfaEngines      int `json:"ofaEngines"`
	// Size is the number of memory slices an instance of the profile takes (placement size).
	Size int `json:"size"`
	// Placements are the possible placement starts (memory slice indices).
	Placements []int `json:"placements"`
}

// MaxGpuInstances is the number of GPU instance ids the driver's capability minors reserve
// per GPU (/proc/driver/nvidia-caps/mig-minors: gpu<N>/gi0 .. gi14).
const MaxGpuInstances = 15

// NvidiaCapsMajor is the character-device major of /dev/nvidia-caps/nvidia-cap<minor>.  The
// real driver gets it dynamically (see /proc/devices, "nvidia-caps"); the bed fixes it.
const NvidiaCapsMajor = 508

// CapsDir is where the MIG capability device nodes live below a root (driver root, container).
const CapsDir = "dev/nvidia-caps"

// MigSlot is one possible MIG device of a GPU: a profile at a placement.  GI is the GPU
// instance id the simulated driver gives it when it exists: its index among the GPU's slots
// (profiles in order, placements in order), so the capability minors name it.
type MigSlot struct {
	Profile MigProfile
	Start   int
	GI      int
}

// MigSlots lists every possible MIG device of g (none without MIG support).
func (g GPU) MigSlots() []MigSlot {
	if g.MIG == nil {
		return nil
	}
	var out []MigSlot
	for _, p := range g.MIG.Profiles {
		for _, start := range p.Placements {
			out = append(out, MigSlot{Profile: p, Start: start, GI: len(out)})
		}
	}
	return out
}

// MigUUID is the UUID of the MIG device at this slot of the GPU with parentUUID.  Real MIG
// UUIDs are new on every creation; the simulated ones are derived from parent, profile and
// placement, so the plugin and nvidia-smi agree without shared state.
func MigUUID(parentUUID string, profileID, start int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/mig/%d/%d", parentUUID, profileID, start)))
	h := hex.EncodeToString(sum[:])
	return fmt.Sprintf("MIG-%s-%s-%s-%s-%s", h[:8], h[8:12], h[12:16], h[16:20], h[20:32])
}

// GIAccessMinor and CIAccessMinor are the minors of the capability device nodes that grant
// access to GPU instance gi (and its compute instance ci) of the GPU with minor gpu, numbered
// as the driver's /proc/driver/nvidia-caps/mig-minors: config 1, monitor 2, then per GPU 15
// GPU instances of 9 minors each (the instance's access, then its 8 compute instances').
func GIAccessMinor(gpu, gi int) int { return 3 + gpu*MaxGpuInstances*9 + gi*9 }

// CIAccessMinor: see GIAccessMinor.
func CIAccessMinor(gpu, gi, ci int) int { return GIAccessMinor(gpu, gi) + 1 + ci }

// DecodeCapMinor is the inverse of GIAccessMinor/CIAccessMinor: gpu, gi, and ci (-1 for the
// GPU instance's own access node); ok is false for config, monitor and out-of-range minors.
func DecodeCapMinor(minor int) (gpu, gi, ci int, ok bool) {
	if minor < 3 {
		return 0, 0, 0, false
	}
	n := minor - 3
	gpu, n = n/(MaxGpuInstances*9), n%(MaxGpuInstances*9)
	gi, n = n/9, n%9
	return gpu, gi, n - 1, true
}

func (m *MIG) validate(g GPU) error {
	if m.MemorySlices <= 0 {
		return fmt.Errorf("gpu %d: mig.memorySlices must be positive", g.Minor)
	}
	seen := map[int]bool{}
	for _, p := range m.Profiles {
		if p.Name == "" || seen[p.ID] {
			return fmt.Errorf("gpu %d: MIG profile %q (id %d) is unnamed or listed twice", g.Minor, p.Name, p.ID)
		}
		seen[p.ID] = true
		for _, s := range p.Placements {
			if p.Size <= 0 || s < 0 || s+p.Size > m.MemorySlices {
				return fmt.Errorf("gpu %d: MIG profile %s placement %d+%d is outside %d memory slices",
					g.Minor, p.Name, s, p.Size, m.MemorySlices)
			}
		}
	}
	if n := len(g.MigSlots()); n > MaxGpuInstances {
		return fmt.Errorf("gpu %d: %d MIG placements, more than the %d GPU instances a GPU has", g.Minor, n, MaxGpuInstances)
	}
	return nil
}
