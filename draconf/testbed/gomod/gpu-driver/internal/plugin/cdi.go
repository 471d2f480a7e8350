package plugin

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"draconf.local/testbed/gpu-driver/internal/nvmlsim"
)

// CDI naming, as upstream cmd/gpu-kubelet-plugin/cdi.go (v0.4.1): one transient spec of kind
// k8s.gpu.nvidia.com/claim per claim, file <cdiRoot>/k8s.gpu.nvidia.com-claim_<claimUID>.yaml,
// device <claimUID>-gpu-<minor>, CDI device ID k8s.gpu.nvidia.com/claim=<claimUID>-gpu-<minor>.
const (
	cdiVendor     = "k8s." + DriverName
	cdiClaimClass = "claim"
	cdiKind       = cdiVendor + "/" + cdiClaimClass

	// ContainerNvidiaSMIPath is where containers find the nvidia-smi stand-in.
	ContainerNvidiaSMIPath = "/usr/bin/nvidia-smi"
)

// mountOptions are the options nvcdi gives driver file bind mounts.
var mountOptions = []string{"ro", "nosuid", "nodev", "bind"}

// optionalControlNodes are injected, like nvcdi's common edits do, when the driver root has
// them; the bed creates only nvidiactl.
var optionalControlNodes = []string{"nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}

// CDIHandler writes and removes the per-claim CDI specs.  Where upstream asks nvcdi for the
// edits of a GPU (device nodes, driver libraries, binaries, hooks) and transforms the
// container driver root into the host driver root, this writes the edits of the simulated
// driver directly: the GPU's device node, /dev/nvidiactl, NVIDIA_VISIBLE_DEVICES, and the
// nvidia-smi stand-in with its nvml.json.
type CDIHandler struct {
	cache               *cdiapi.Cache
	cdiRoot             string
	hostDriverRoot      string
	containerDriverRoot string
	nvidiaSMIRelPath    string
	// extraEnv is added to every claim's container environment (the nvml-flaky fault's).
	extraEnv []string
}

// NewCDIHandler creates the handler; nvidiaSMIPath is nvidia-smi as found in the container
// driver root.
func NewCDIHandler(cdiRoot, hostDriverRoot, containerDriverRoot, nvidiaSMIPath string) (*CDIHandler, error) {
	cache, _ := cdiapi.NewCache(cdiapi.WithSpecDirs(cdiRoot), cdiapi.WithAutoRefresh(false))
	rel := ContainerNvidiaSMIPath
	if r, err := filepath.Rel(containerDriverRoot, nvidiaSMIPath); err == nil && !strings.HasPrefix(r, "..") {
		rel = "/" + r
	}
	return &CDIHandler{
		cache:               cache,
		cdiRoot:             cdiRoot,
		hostDriverRoot:      hostDriverRoot,
		containerDriverRoot: containerDriverRoot,
		nvidiaSMIRelPath:    rel,
	}, nil
}

// simulate applies the faults that change what containers are given.
func (h *CDIHandler) simulate(faults Faults) {
	if faults.Has(FaultNVMLFlaky) {
		h.extraEnv = append(h.extraEnv, FlakyEnv)
	}
}

// SpecName is the transient spec name of a claim (cdiapi.GenerateTransientSpecName), without
// the .yaml extension the CDI library adds.
func SpecName(claimUID string) string {
	return cdiapi.GenerateTransientSpecName(cdiVendor, cdiClaimClass, claimUID)
}

// SpecPath is the file the claim's spec is written to.
func (h *CDIHandler) SpecPath(claimUID string) string {
	return filepath.Join(h.cdiRoot, SpecName(claimUID)+".yaml")
}

// ClaimDeviceName is the fully qualified CDI device ID of a device of a claim, as the real
// plugin names it, e.g. k8s.gpu.nvidia.com/claim=dab5ab50-...-gpu-0.
func ClaimDeviceName(claimUID string, gpu *GpuInfo) string {
	return cdiparser.QualifiedName(cdiVendor, cdiClaimClass, claimDeviceBaseName(claimUID, gpu))
}

func claimDeviceBaseName(claimUID string, gpu *GpuInfo) string {
	return fmt.Sprintf("%s-%s", claimUID, gpu.CanonicalName())
}

// BuildClaimSpec builds the claim's spec.  allocated are the claim's GPUs (they name the CDI
// devices); injected[i] is the GPU whose device node device i really gives the container,
// which differs from allocated[i] only under the cdi-wrong-device fault.
func (h *CDIHandler) BuildClaimSpec(claimUID string, allocated, injected []*GpuInfo) (*cdispec.Spec, error) {
	if len(allocated) != len(injected) {
		return nil, fmt.Errorf("internal error: %d allocated but %d injected devices", len(allocated), len(injected))
	}
	spec := &cdispec.Spec{Kind: cdiKind}
	var uuids []string
	seen := map[string]bool{}
	for i, gpu := range allocated {
		real := injected[i]
		node, err := h.deviceNode(fmt.Sprintf("nvidia%d", real.Minor), nvmlsim.NvidiaMajor, real.Minor, true)
		if err != nil {
			return nil, fmt.Errorf("CDI device %s: %w", claimDeviceBaseName(claimUID, gpu), err)
		}
		spec.Devices = append(spec.Devices, cdispec.Device{
			Name:           claimDeviceBaseName(claimUID, gpu),
			ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{node}},
		})
		if !seen[real.UUID] {
			seen[real.UUID] = true
			uuids = append(uuids, real.UUID)
		}
	}
	common, err := h.commonEdits(uuids)
	if err != nil {
		return nil, fmt.Errorf("edits common to the claim's CDI devices: %w", err)
	}
	spec.ContainerEdits = *common
	version, err := cdiapi.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("no CDI spec version fits the claim's spec: %w", err)
	}
	spec.Version = version
	return spec, nil
}

// WriteClaimSpec writes the spec through the CDI library (validated, atomically replaced).
func (h *CDIHandler) WriteClaimSpec(claimUID string, spec *cdispec.Spec) error {
	if err := h.cache.WriteSpec(spec, SpecName(claimUID)); err != nil {
		return fmt.Errorf("writing the CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}

// DeleteClaimSpec removes the claim's spec; a missing spec is not an error.
func (h *CDIHandler) DeleteClaimSpec(claimUID string) error {
	return h.cache.RemoveSpec(SpecName(claimUID))
}

// commonEdits are the edits of every device of the spec.
func (h *CDIHandler) commonEdits(uuids []string) (*cdispec.ContainerEdits, error) {
	ctl, err := h.deviceNode("nvidiactl", nvmlsim.NvidiaMajor, nvmlsim.NvidiactlMinor, true)
	if err != nil {
		return nil, err
	}
	edits := &cdispec.ContainerEdits{
		Env:         append([]string{"NVIDIA_VISIBLE_DEVICES=" + strings.Join(uuids, ",")}, h.extraEnv...),
		DeviceNodes: []*cdispec.DeviceNode{ctl},
	}
	for _, name := range optionalControlNodes {
		if node, err := h.deviceNode(name, 0, 0, false); err == nil && node != nil {
			edits.DeviceNodes = append(edits.DeviceNodes, node)
		}
	}
	for _, m := range []struct{ rel, ctr string }{
		{h.nvidiaSMIRelPath, ContainerNvidiaSMIPath},
		{"/" + nvmlsim.RelPath, "/" + nvmlsim.RelPath},
	} {
		if _, err := os.Stat(filepath.Join(h.containerDriverRoot, m.rel)); err != nil {
			return nil, fmt.Errorf("driver file %s, to mount into containers: %w", m.rel, err)
		}
		edits.Mounts = append(edits.Mounts, &cdispec.Mount{
			HostPath:      filepath.Join(h.hostDriverRoot, m.rel),
			ContainerPath: m.ctr,
			Options:       append([]string(nil), mountOptions...),
		})
	}
	// The GPUs' mutable state (compute mode, time slice), which containers see through
	// nvidia-smi as they see the hardware's on a real node; read-only, as nvidia-smi -c in a
	// container is refused.
	state := "/" + nvmlsim.StateRelDir
	if fi, err := os.Stat(filepath.Join(h.containerDriverRoot, state)); err == nil && fi.IsDir() {
		edits.Mounts = append(edits.Mounts, &cdispec.Mount{
			HostPath:      filepath.Join(h.hostDriverRoot, state),
			ContainerPath: state,
			Options:       []string{"ro", "nosuid", "nodev", "rbind"},
		})
	}
	return edits, nil
}

// deviceNode describes /dev/<name> for the container, with its host path below the host
// driver root.  The node must exist in the container driver root (as nvcdi discovers it
// there); its type and numbers are taken from it when it is a character device, else the
// defaults are used.  With needDefault false, a node that is not a character device is
// skipped (nil, nil).
func (h *CDIHandler) deviceNode(name string, major, minor int, needDefault bool) (*cdispec.DeviceNode, error) {
	ctrPath := filepath.Join(h.containerDriverRoot, "dev", name)
	fi, err := os.Stat(ctrPath)
	if err != nil {
		return nil, fmt.Errorf("device node /dev/%s is not in the driver root: %w", name, err)
	}
	if fi.Mode()&fs.ModeCharDevice != 0 {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			major, minor = nvmlsim.DevMajor(uint64(st.Rdev)), nvmlsim.DevMinor(uint64(st.Rdev))
		}
	} else if !needDefault {
		return nil, nil
	}
	return &cdispec.DeviceNode{
		Path:     "/dev/" + name,
		HostPath: filepath.Join(h.hostDriverRoot, "dev", name),
		Type:     "c",
		Major:    int64(major),
		Minor:    int64(minor),
	}, nil
}
