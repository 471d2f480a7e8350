// Package plugin is the simulated NVIDIA GPU DRA kubelet plugin: the business logic of
// kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 cmd/gpu-kubelet-plugin for full GPUs, with
// NVML replaced by the simulated NVML data of package nvmlsim and nvcdi replaced by plain CDI
// container edits written with the CDI library.
//
// Simulated faults (Config.Faults):
//
//   - attribute-drift: devices are published without productName (as after a driver
//     upgrade that renamed it);
//   - no-devices: NVML finds no GPU; like upstream with zero GPUs the plugin still
//     registers and publishes its pool: one ResourceSlice with no devices;
//   - cdi-not-injected: prepare succeeds and returns the devices without CDI device IDs and
//     writes no CDI spec, so containers get nothing;
//   - cdi-wrong-device: the CDI devices of a claim carry the device nodes (and
//     NVIDIA_VISIBLE_DEVICES) of GPUs of the node the claim does not hold, the next ones by
//     minor after the claim's lowest, wrapping; a claim holding every GPU gets its own;
//   - unprepare-fails: NodeUnprepareResources fails for every claim ("simulated: failed to
//     unprepare devices of claim <ns>/<name>:<uid>: device busy"); nothing is undone, so
//     the kubelet keeps retrying;
//   - prepare-fails: NodePrepareResources fails for every claim with an NVML error (a plugin
//     that runs, registers and publishes, yet cannot hand out any GPU); nothing is prepared;
//   - unprepare-keeps-device: NodeUnprepareResources reports success and deletes the claim's
//     CDI spec, but the claim stays in the ledger, so its devices stay held: the next
//     claim given one of them is refused as held by a prepared claim;
//   - crash: the process exits 1 at start with an NVML initialisation error (see
//     SimulatedNVMLInitError; handled by the command);
//   - admin-access-exclusive: a device allocated with adminAccess is checked for overlap like
//     any other (a driver without admin-access support), so a monitoring claim on a GPU that
//     another prepared claim holds fails: "device gpu-N is held by claim <uid>, prepared on
//     this node and not unprepared since";
//   - sharing-config-ignored: the plugin reads no opaque claim config (as a driver without
//     GpuConfig support): a claim's sharing config, valid or not, is neither decoded nor
//     validated nor applied; its devices are prepared as with the default config;
//   - nvml-flaky: containers get NVIDIA_SIM_FLAKY=exec-once, so nvidia-smi fails NVML
//     initialisation once per container, in the first process exec'd into it (see
//     cmd/nvidia-smi): a failure that does not persist, for telling flakes from faults;
//   - mig-counters-ignored: with DynamicMIG, MIG devices are published without
//     consumesCounters (a driver that forgot them), so the scheduler may give a GPU and a MIG
//     device of it to two claims; the node then refuses the second (NVML: Insufficient
//     Resources), as the real GPU would;
//   - mig-parent-mislabelled: with DynamicMIG, MIG devices of more than one memory slice
//     (2g.20gb and larger on an H100) are published with the next MIG-capable GPU's UUID as
//     parentUUID (a driver whose device inventory mixes up its GPUs); their names, counters and
//     what preparing them creates stay the right GPU's, so a container lists such a device
//     under a GPU other than the one its parentUUID names (see mislabelledParent in mig.go);
//   - mig-unpublished: with DynamicMIG, no MIG device is published (a driver whose MIG
//     discovery broke); each MIG-capable GPU is still published whole, consuming its counter
//     set, so the cluster shows that it could be partitioned and that nothing can ask for a part;
//   - mps-daemon-fails: the MPS control daemon's Deployment gets NVIDIA_SIM_MPS_DAEMON=fail,
//     so the nvidia-cuda-mps-control stand-in's `-d` fails and the container exits at once,
//     as a daemon that cannot start on its GPUs; preparing an MPS claim then fails: "MPS
//     control daemon <name> is not ready after N checks: ..." (see mps.go).
package plugin

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

const (
	// DriverName is the DRA driver name (upstream cmd/gpu-kubelet-plugin/main.go).
	DriverName = "gpu.nvidia.com"
	// LedgerFileName is the file of the claim ledger (ledger.go) in the plugin data
	// directory: the name the real driver gives its checkpoint there (upstream main.go
	// DriverPluginCheckpointFileBasename).
	LedgerFileName = "checkpoint.json"
	// GpuDeviceType is the value of the `type` attribute of a full GPU (upstream types.go).
	GpuDeviceType = "gpu"
)

// Config is what the plugin needs from its flags.
type Config struct {
	NodeName string
	// HostDriverRoot is the driver root on the node (NVIDIA_DRIVER_ROOT, e.g.
	// /run/nvidia/driver); it prefixes every host path in CDI specs.
	HostDriverRoot string
	// ContainerDriverRoot is where the host driver root is mounted in the plugin container
	// (default /driver-root); the plugin reads nvml.json and device nodes there.
	ContainerDriverRoot string
	// CDIRoot is the directory the per-claim CDI specs are written to.
	CDIRoot string
	// KubeletRegistrarDirectoryPath and KubeletPluginsDirectoryPath are the kubelet's plugin
	// registration and plugin data directories.
	KubeletRegistrarDirectoryPath string
	KubeletPluginsDirectoryPath   string
	// HealthcheckPort: >0 serve the gRPC health service there, 0 on a random port, <0 off.
	HealthcheckPort int
	// FeatureGates are the chart's featureGates (FEATURE_GATES): TimeSlicingSettings and
	// MPSSupport for GPU sharing (sharing.go), DynamicMIG for MIG (mig.go).
	FeatureGates FeatureGates
	// DynamicMIG is FeatureGates' DynamicMIG: MIG-capable GPUs are published as partitionable
	// devices (mig.go).
	DynamicMIG bool
	Faults     Faults
	// Namespace is the plugin's namespace (NAMESPACE), where the MPS control daemons'
	// Deployments are created, as upstream's flags.namespace.
	Namespace string
	// ImageName is the MPS control daemon's image (IMAGE_NAME, upstream flags.imageName).
	ImageName string
	// Client is the API client (upstream config.clientsets.Core), set by NewDriver.
	Client kubernetes.Interface
}

// DriverPluginPath is the plugin's data directory: its DRA socket and ledger live here.
func (c *Config) DriverPluginPath() string {
	return filepath.Join(c.KubeletPluginsDirectoryPath, DriverName)
}

// Fault is one simulated malfunction.
type Fault string

const (
	// FaultAttributeDrift publishes devices without productName.
	FaultAttributeDrift Fault = "attribute-drift"
	// FaultNoDevices makes NVML find no GPU.
	FaultNoDevices Fault = "no-devices"
	// FaultCDINotInjected prepares claims without CDI device IDs or device edits.
	FaultCDINotInjected Fault = "cdi-not-injected"
	// FaultCDIWrongDevice gives containers GPUs of the node not allocated to the claim.
	FaultCDIWrongDevice Fault = "cdi-wrong-device"
	// FaultUnprepareFails fails NodeUnprepareResources for every claim.
	FaultUnprepareFails Fault = "unprepare-fails"
	// FaultPrepareFails fails NodePrepareResources for every claim.
	FaultPrepareFails Fault = "prepare-fails"
	// FaultUnprepareKeepsDevice reports unprepare done but keeps the claim's devices held.
	FaultUnprepareKeepsDevice Fault = "unprepare-keeps-device"
	// FaultCrash exits at start with an NVML initialisation error.
	FaultCrash Fault = "crash"
	// FaultAdminAccessExclusive prepares adminAccess devices as exclusive ones.
	FaultAdminAccessExclusive Fault = "admin-access-exclusive"
	// FaultNVMLFlaky makes nvidia-smi fail once per container, in its first exec.
	FaultNVMLFlaky Fault = "nvml-flaky"
	// FaultSharingConfigIgnored reads no opaque claim config.
	FaultSharingConfigIgnored Fault = "sharing-config-ignored"
	// FaultMigCountersIgnored publishes MIG devices without consumesCounters.
	FaultMigCountersIgnored Fault = "mig-counters-ignored"
	// FaultMigParentMislabelled publishes multi-slice MIG devices under the next GPU's UUID.
	FaultMigParentMislabelled Fault = "mig-parent-mislabelled"
	// FaultMigUnpublished publishes no MIG device under DynamicMIG.
	FaultMigUnpublished Fault = "mig-unpublished"
	// FaultMpsDaemonFails makes the MPS control daemon's container exit at once.
	FaultMpsDaemonFails Fault = "mps-daemon-fails"
	// FaultLastGPUFails fails NodePrepareResources for claims given the node's last GPU only:
	// one bad GPU beside healthy ones, published like them.
	FaultLastGPUFails Fault = "last-gpu-fails"
)

// FlakyEnv is the container environment the nvml-flaky fault adds through CDI.
const FlakyEnv = "NVIDIA_SIM_FLAKY=exec-once"

// AllFaults lists the valid fault names.
var AllFaults = []Fault{FaultAttributeDrift, FaultNoDevices, FaultCDINotInjected,
	FaultCDIWrongDevice, FaultUnprepareFails, FaultCrash, FaultAdminAccessExclusive,
	FaultNVMLFlaky, FaultSharingConfigIgnored, FaultMigCountersIgnored, FaultMigParentMislabelled,
	FaultMigUnpublished, FaultMpsDaemonFails, FaultPrepareFails, FaultUnprepareKeepsDevice, FaultLastGPUFails}

// Faults is a set of simulated malfunctions.
type Faults map[Fault]bool

// Has reports whether fault f is active.
func (f Faults) Has(fault Fault) bool { return f[fault] }

// String lists the active faults, sorted, comma-separated.
func (f Faults) String() string {
	var names []string
	for k, on := range f {
		if on {
			names = append(names, string(k))
		}
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

// ParseFaults turns fault names (each possibly a comma-separated list) into a set.
func ParseFaults(values ...string) (Faults, error) {
	out := Faults{}
	for _, v := range values {
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			if !slices.Contains(AllFaults, Fault(name)) {
				valid := make([]string, len(AllFaults))
				for i, f := range AllFaults {
					valid[i] = string(f)
				}
				return nil, fmt.Errorf("unknown simulated fault %q (valid: %s)", name, strings.Join(valid, ", "))
			}
			out[Fault(name)] = true
		}
	}
	return out, nil
}
