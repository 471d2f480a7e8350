package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ClaimCheckpointState is upstream's checkpointv.go ClaimCheckpointState.
type ClaimCheckpointState string

const (
	ClaimCheckpointStatePrepareStarted   ClaimCheckpointState = "PrepareStarted"
	ClaimCheckpointStatePrepareCompleted ClaimCheckpointState = "PrepareCompleted"
)

// Checkpoint is the node-local record of prepared claims, kept in
// <kubelet plugins dir>/gpu.nvidia.com/checkpoint.json like upstream's (whose CheckpointV2
// also carries a checksum and the full claim status; a plain JSON file is enough here).
type Checkpoint struct {
	// NodeBootID invalidates the checkpoint after a reboot, as upstream does.
	NodeBootID     string                   `json:"nodeBootID,omitempty"`
	PreparedClaims map[string]PreparedClaim `json:"preparedClaims"`
}

// PreparedClaim is one claim's entry, keyed by claim UID.
type PreparedClaim struct {
	CheckpointState ClaimCheckpointState `json:"checkpointState"`
	Namespace       string               `json:"namespace,omitempty"`
	Name            string               `json:"name,omitempty"`
	PreparedDevices []PreparedDevice     `json:"preparedDevices,omitempty"`
}

// PreparedDevice is one allocated device of a claim and what was returned for it.  UUID and
// InjectedMinor (the GPU the CDI spec really hands out) let a restarted plugin log and
// rewrite what it did.
type PreparedDevice struct {
	Requests      []string `json:"requests"`
	PoolName      string   `json:"poolName"`
	DeviceName    string   `json:"deviceName"`
	CDIDeviceIDs  []string `json:"cdiDeviceIDs"`
	UUID          string   `json:"uuid"`
	AdminAccess   bool     `json:"adminAccess,omitempty"`
	InjectedMinor *int     `json:"injectedMinor,omitempty"`
	// Sharing is what the claim's GpuConfig did to this device (sharing.go), for unprepare.
	Sharing *SharingState `json:"sharing,omitempty"`
}

// heldByOthers calls visit with each device, not prepared with adminAccess, of every claim but
// claimUID whose preparation completed, in claim UID order (so errors name the same claim every
// time); the first error visit returns ends the walk and is returned.
func (cp *Checkpoint) heldByOthers(claimUID string, visit func(uid string, d PreparedDevice) error) error {
	uids := make([]string, 0, len(cp.PreparedClaims))
	for uid := range cp.PreparedClaims {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	for _, uid := range uids {
		pc := cp.PreparedClaims[uid]
		if uid == claimUID || pc.CheckpointState != ClaimCheckpointStatePrepareCompleted {
			continue
		}
		for _, d := range pc.PreparedDevices {
			if d.AdminAccess {
				continue
			}
			if err := visit(uid, d); err != nil {
				return err
			}
		}
	}
	return nil
}

type checkpointStore struct {
	path string
}

func (c checkpointStore) read() (*Checkpoint, error) {
	raw, err := os.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("unable to read checkpoint: %w", err)
	}
	cp := &Checkpoint{}
	if err := json.Unmarshal(raw, cp); err != nil {
		return nil, fmt.Errorf("unable to parse checkpoint %s: %w", c.path, err)
	}
	if cp.PreparedClaims == nil {
		cp.PreparedClaims = map[string]PreparedClaim{}
	}
	return cp, nil
}

// write replaces the checkpoint atomically.
func (c checkpointStore) write(cp *Checkpoint) error {
	raw, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(c.path)
	tmp, err := os.CreateTemp(dir, ".checkpoint-*.tmp")
	if err != nil {
		return fmt.Errorf("unable to create checkpoint: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("unable to write checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("unable to write checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.path); err != nil {
		return fmt.Errorf("unable to write checkpoint: %w", err)
	}
	return nil
}

// update reads, mutates and writes back the checkpoint.
func (c checkpointStore) update(mutate func(*Checkpoint)) error {
	cp, err := c.read()
	if err != nil {
		return fmt.Errorf("unable to get checkpoint: %w", err)
	}
	mutate(cp)
	return c.write(cp)
}

// bootIDPath is the kernel's boot id; a variable for tests.
var bootIDPath = "/proc/sys/kernel/random/boot_id"

func currentBootID() string {
	raw, err := os.ReadFile(bootIDPath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(raw))
}
