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

// The ledger is this node's own record of the claims the plugin has taken on: for each claim
// UID, how far its preparation got and which devices it holds.  It lives in a JSON file in the
// plugin data directory (LedgerFileName, where the real driver keeps its checkpoint), so that a
// plugin restarted between two kubelet calls answers a repeated prepare as before, can still
// unprepare, and keeps refusing a device another claim holds.  The real driver's checkpoint
// also carries a checksum and each claim's status; a plain JSON document serves here.
type ledger struct {
	// BootID is the kernel boot the entries belong to: a reboot undoes every preparation, so
	// a ledger of another boot is dropped (see openLedger).
	BootID string                `json:"bootID,omitempty"`
	Claims map[string]claimEntry `json:"claims"`
}

// stage is how far the preparation of a claim got.
type stage string

const (
	// stagePreparing: the claim was taken on; what it holds may be half set up.
	stagePreparing stage = "preparing"
	// stagePrepared: its devices, CDI spec and sharing are in place and were handed out.
	stagePrepared stage = "prepared"
)

// claimEntry is the ledger's line for one claim.
type claimEntry struct {
	Stage     stage        `json:"stage"`
	Namespace string       `json:"namespace,omitempty"`
	Name      string       `json:"name,omitempty"`
	Devices   []heldDevice `json:"devices,omitempty"`
}

// heldDevice is one device a claim holds on this node and what the kubelet was told about it.
// UUID and InjectedMinor (the GPU whose node the CDI spec really hands out) let a restarted
// plugin log what it undoes and write a lost spec again.
type heldDevice struct {
	Requests      []string `json:"requests"`
	PoolName      string   `json:"poolName"`
	DeviceName    string   `json:"deviceName"`
	CDIDeviceIDs  []string `json:"cdiDeviceIDs"`
	UUID          string   `json:"uuid"`
	AdminAccess   bool     `json:"adminAccess,omitempty"`
	InjectedMinor *int     `json:"injectedMinor,omitempty"`
	// Sharing is what the claim's GpuConfig did to the device (sharing.go), to undo it.
	Sharing *SharingState `json:"sharing,omitempty"`
}

// heldByOthers calls visit with each device, not prepared with adminAccess, of every claim but
// claimUID whose preparation completed, in claim UID order (so errors name the same claim every
// time); the first error visit returns ends the walk and is returned.
func (l *ledger) heldByOthers(claimUID string, visit func(uid string, d heldDevice) error) error {
	uids := make([]string, 0, len(l.Claims))
	for uid, e := range l.Claims {
		if uid != claimUID && e.Stage == stagePrepared {
			uids = append(uids, uid)
		}
	}
	sort.Strings(uids)
	for _, uid := range uids {
		for _, d := range l.Claims[uid].Devices {
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

// ledgerFile is where the ledger is kept.  Each call reads or replaces the whole file: the
// Preparer's lock orders them.
type ledgerFile string

// load reads the ledger; a missing file is fs.ErrNotExist, unwrapped.
func (f ledgerFile) load() (*ledger, error) {
	raw, err := os.ReadFile(string(f))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("reading the claim ledger: %w", err)
	}
	l := &ledger{}
	if err := json.Unmarshal(raw, l); err != nil {
		return nil, fmt.Errorf("the claim ledger %s is not valid JSON: %w", string(f), err)
	}
	if l.Claims == nil {
		l.Claims = map[string]claimEntry{}
	}
	return l, nil
}

// save replaces the ledger file with l: written beside it, then renamed over it, so that a
// plugin killed half-way leaves the old ledger or the new one, never a part.
func (f ledgerFile) save(l *ledger) error {
	raw, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(string(f)), ".ledger-*")
	if err != nil {
		return fmt.Errorf("saving the claim ledger: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename there is nothing left to remove
	_, err = tmp.Write(append(raw, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), string(f))
	}
	if err != nil {
		return fmt.Errorf("saving the claim ledger: %w", err)
	}
	return nil
}

// edit loads the ledger, lets change alter it and saves it.
func (f ledgerFile) edit(change func(*ledger)) error {
	l, err := f.load()
	if err != nil {
		return err
	}
	change(l)
	return f.save(l)
}

// bootIDPath is where the kernel tells its boot ID; a variable for tests.
var bootIDPath = "/proc/sys/kernel/random/boot_id"

// currentBootID is this boot's ID, or "" when the kernel does not tell it.
func currentBootID() string {
	raw, err := os.ReadFile(bootIDPath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(raw))
}

// sameBoot says whether a ledger written in boot `written` still holds in boot `now`; an
// unknown boot on either side cannot prove a reboot, so the ledger is kept.
func sameBoot(written, now string) bool {
	return written == "" || now == "" || written == now
}
