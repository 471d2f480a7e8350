package plugin

// GPU sharing: the opaque claim parameters of kind GpuConfig (apiVersion
// resource.nvidia.com/v1beta1) and what preparing a claim with them does.  What is accepted,
// what is refused and what is done to the GPUs follow the NVIDIA driver release nvidia.py
// names (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1: the GpuConfig API of
// api/nvidia.com/resource/v1beta1, the preparation of cmd/gpu-kubelet-plugin device_state.go
// and sharing.go); the code and its messages are this project's.  The NVIDIA Go modules are
// not available to the bed's build, so the JSON shape of the API is declared here, and decoded
// strictly by apimachinery as the real driver decodes it: an unknown field is refused in
// apimachinery's words ("strict decoding error: unknown field ...").  Every other refusal
// names the config kind, GpuConfig, which draconf/diagnosis/rules/node.py keys on.
//
// Per group of results that one config applies to:
//
//   - TimeSlicing (feature gate TimeSlicingSettings): each GPU in compute mode DEFAULT and
//     given the interval's time slice, by `nvidia-smi -i <uuid> -c DEFAULT` and `nvidia-smi
//     compute-policy -i <uuid> --set-timeslice <0..3>`; unprepare sets the slice back to
//     Default (0).  No container edits.
//   - MPS (feature gate MPSSupport): the daemon's directories under <plugin dir>/mps/<id>
//     (pipe, shm, log), each GPU in EXCLUSIVE_PROCESS (`nvidia-smi -i <uuid> -c
//     EXCLUSIVE_PROCESS`), the MPS control daemon (mps.go), and on each device of the group
//     the container edits CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps, the pipe directory bound
//     at /tmp/nvidia-mps and the shm directory at /dev/shm; unprepare stops the daemon and
//     removes the directories.
//
// Simulated: the GPUs' state (the nvidia-smi stand-in, nvmlsim.GPUState) and the daemon's
// binary (internal/mpscontrol).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	stdjson "encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// The API group, version and kind of the driver's opaque parameters.
const (
	ConfigGroupName = "resource.nvidia.com"
	ConfigVersion   = "v1beta1"
	GpuConfigKind   = "GpuConfig"
)

// The values of sharing.strategy.
const (
	TimeSlicingStrategy = "TimeSlicing"
	MpsStrategy         = "MPS"
)

// The feature gates of the chart's featureGates (FEATURE_GATES) that allow each strategy;
// both are alpha in the real driver, off unless the chart sets them.
const (
	FeatureTimeSlicingSettings = "TimeSlicingSettings"
	FeatureMPSSupport          = "MPSSupport"
)

// strategyGate is the gate each known strategy needs.
var strategyGate = map[GpuSharingStrategy]string{
	TimeSlicingStrategy: FeatureTimeSlicingSettings,
	MpsStrategy:         FeatureMPSSupport,
}

// FeatureGates are the gates set on, by name.
type FeatureGates map[string]bool

// Enabled reports whether gate is on.
func (g FeatureGates) Enabled(gate string) bool { return g[gate] }

// ParseFeatureGates reads FEATURE_GATES as the chart renders it, NAME=BOOL entries separated
// by commas (the trailing comma the chart leaves is fine).
func ParseFeatureGates(value string) (FeatureGates, error) {
	out := FeatureGates{}
	for _, entry := range strings.Split(value, ",") {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		name, setting, _ := strings.Cut(entry, "=")
		on, err := strconv.ParseBool(strings.TrimSpace(setting))
		if err != nil {
			return nil, fmt.Errorf("FEATURE_GATES entry %q is not NAME=true or NAME=false", entry)
		}
		out[strings.TrimSpace(name)] = on
	}
	return out, nil
}

// GpuConfig is the object a claim's or a class's opaque parameters for gpu.nvidia.com carry.
// Its Go name is its kind: the scheme registers it by that name.
type GpuConfig struct {
	metav1.TypeMeta `json:",inline"`
	Sharing         *GpuSharing `json:"sharing,omitempty"`
}

// GpuSharing is sharing: a strategy, and the settings of that strategy only.
type GpuSharing struct {
	Strategy          GpuSharingStrategy `json:"strategy"`
	TimeSlicingConfig *TimeSlicingConfig `json:"timeSlicingConfig,omitempty"`
	MpsConfig         *MpsConfig         `json:"mpsConfig,omitempty"`
}

// GpuSharingStrategy is sharing.strategy: TimeSlicing or MPS.
type GpuSharingStrategy string

// TimeSlicingConfig is sharing.timeSlicingConfig.
type TimeSlicingConfig struct {
	Interval *TimeSliceInterval `json:"interval,omitempty"`
}

// TimeSliceInterval is a named time slice: Default, Short, Medium or Long.
type TimeSliceInterval string

// The intervals, in the order of the compute-policy levels (0 to 3) they stand for.
const (
	DefaultTimeSlice TimeSliceInterval = "Default"
	ShortTimeSlice   TimeSliceInterval = "Short"
	MediumTimeSlice  TimeSliceInterval = "Medium"
	LongTimeSlice    TimeSliceInterval = "Long"
)

var timeSliceLevels = []TimeSliceInterval{DefaultTimeSlice, ShortTimeSlice, MediumTimeSlice, LongTimeSlice}

// level is the `nvidia-smi compute-policy --set-timeslice` value of t; false for a name
// that is none of the four.
func (t TimeSliceInterval) level() (int, bool) {
	i := slices.Index(timeSliceLevels, t)
	return i, i >= 0
}

// MpsConfig is sharing.mpsConfig: the daemon's default settings.
type MpsConfig struct {
	DefaultActiveThreadPercentage     *int                          `json:"defaultActiveThreadPercentage,omitempty"`
	DefaultPinnedDeviceMemoryLimit    *resource.Quantity            `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
	DefaultPerDevicePinnedMemoryLimit MpsPerDevicePinnedMemoryLimit `json:"defaultPerDevicePinnedMemoryLimit,omitempty"`
}

// MpsPerDevicePinnedMemoryLimit is a pinned memory limit per GPU of the claim, each keyed by
// the GPU's UUID or by its index among the claim's GPUs.
type MpsPerDevicePinnedMemoryLimit map[string]resource.Quantity

// DeepCopyObject lets the scheme hand out GpuConfigs (a JSON round trip: the type is small).
func (c *GpuConfig) DeepCopyObject() runtime.Object {
	if c == nil {
		return nil
	}
	raw, err := stdjson.Marshal(c)
	if err != nil {
		panic(err)
	}
	out := &GpuConfig{}
	if err := stdjson.Unmarshal(raw, out); err != nil {
		panic(err)
	}
	return out
}

// StrictDecoder decodes opaque parameters into a GpuConfig, refusing unknown fields (the
// strictness the real driver decodes with).
var StrictDecoder runtime.Decoder

func init() {
	gv := schema.GroupVersion{Group: ConfigGroupName, Version: ConfigVersion}
	scheme := runtime.NewScheme()
	scheme.AddKnownTypes(gv, &GpuConfig{})
	metav1.AddToGroupVersion(scheme, gv)
	StrictDecoder = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme,
		json.SerializerOptions{Strict: true})
}

// check refuses what this driver will not apply, naming the field at fault: an unknown
// strategy, a strategy whose gate is off, settings of the other strategy, an unknown
// interval, a thread percentage outside 0..100.  (Pinned memory limits are checked when
// the group's GPUs are known: pinnedLimits.)
func (c *GpuConfig) check(gates FeatureGates) error {
	s := c.Sharing
	if s == nil {
		return nil
	}
	gate, known := strategyGate[s.Strategy]
	if !known {
		return fmt.Errorf("sharing strategy %q is unknown (this driver knows %s and %s)",
			s.Strategy, TimeSlicingStrategy, MpsStrategy)
	}
	if !gates.Enabled(gate) {
		return fmt.Errorf("sharing strategy %q needs the %s feature gate, which this driver runs without",
			s.Strategy, gate)
	}
	switch s.Strategy {
	case TimeSlicingStrategy:
		if s.MpsConfig != nil {
			return fmt.Errorf("sharing strategy %s takes no mpsConfig", s.Strategy)
		}
		if tsc := s.TimeSlicingConfig; tsc != nil {
			var name TimeSliceInterval
			if tsc.Interval != nil {
				name = *tsc.Interval
			}
			if _, ok := name.level(); !ok {
				return fmt.Errorf("timeSlicingConfig.interval %q is none of %v", name, timeSliceLevels)
			}
		}
	case MpsStrategy:
		if s.TimeSlicingConfig != nil {
			return fmt.Errorf("sharing strategy %s takes no timeSlicingConfig", s.Strategy)
		}
		if m := s.MpsConfig; m != nil && m.DefaultActiveThreadPercentage != nil {
			if p := *m.DefaultActiveThreadPercentage; p < 0 || p > 100 {
				return fmt.Errorf("mpsConfig.defaultActiveThreadPercentage %d is outside 0 to 100", p)
			}
		}
	}
	return nil
}

// timeSlice is the interval a checked TimeSlicing config asks for: Default when it has no
// timeSlicingConfig.
func (s *GpuSharing) timeSlice() TimeSliceInterval {
	if s.TimeSlicingConfig == nil || s.TimeSlicingConfig.Interval == nil {
		return DefaultTimeSlice
	}
	return *s.TimeSlicingConfig.Interval
}

// pinnedLimits are the pinned device memory limit of each of the group's GPUs (uuids), in the
// whole MiB the daemon's set_default_device_pinned_mem_limit takes ("10240M"): the default
// limit on every GPU, then each per-device entry on its GPU.  A limit under 1Mi, or a key
// that is neither a UUID of the group nor an index into it, is refused.
func (c *MpsConfig) pinnedLimits(uuids []string) (map[string]string, error) {
	inMiB := func(q resource.Quantity) (string, bool) {
		mib := q.Value() >> 20
		return strconv.FormatInt(mib, 10) + "M", mib > 0
	}
	out := map[string]string{}
	if q := c.DefaultPinnedDeviceMemoryLimit; q != nil {
		v, ok := inMiB(*q)
		if !ok {
			return nil, fmt.Errorf("mpsConfig.defaultPinnedDeviceMemoryLimit %s is under 1Mi", q.String())
		}
		for _, u := range uuids {
			out[u] = v
		}
	}
	for key, q := range c.DefaultPerDevicePinnedMemoryLimit {
		gpu := key
		if !slices.Contains(uuids, key) {
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= len(uuids) {
				return nil, fmt.Errorf("mpsConfig.defaultPerDevicePinnedMemoryLimit key %q is neither a UUID "+
					"of the claim's GPUs nor an index from 0 to %d", key, len(uuids)-1)
			}
			gpu = uuids[i]
		}
		v, ok := inMiB(q)
		if !ok {
			return nil, fmt.Errorf("mpsConfig.defaultPerDevicePinnedMemoryLimit[%q] %s is under 1Mi", key, q.String())
		}
		out[gpu] = v
	}
	return out, nil
}

// SharingState is what a config did to one prepared device, kept in the ledger so that
// unprepare can undo it.
type SharingState struct {
	TimeSliceApplied   bool   `json:"timeSliceApplied,omitempty"`
	MpsControlDaemonID string `json:"mpsControlDaemonID,omitempty"`
}

// opaqueConfig is one decoded GpuConfig and the requests it is for (none: every request).
type opaqueConfig struct {
	requests []string
	config   *GpuConfig
}

// driverConfigs are the allocation's GpuConfigs for this driver in the order they take
// effect, weakest first: the DeviceClass's, then the claim's own.  Configs for other drivers
// are skipped; one for this driver that does not decode refuses the claim.
func driverConfigs(allocation *resourceapi.AllocationResult) ([]opaqueConfig, error) {
	var fromClass, fromClaim []opaqueConfig
	for i, c := range allocation.Devices.Config {
		if c.Opaque == nil {
			return nil, fmt.Errorf("config #%d of the allocation has no opaque parameters, the only kind "+
				"this driver reads (a GpuConfig)", i)
		}
		if c.Opaque.Driver != DriverName {
			continue
		}
		obj, err := runtime.Decode(StrictDecoder, c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("opaque config #%d for %s is not a valid %s: %w", i, DriverName, GpuConfigKind, err)
		}
		gc, ok := obj.(*GpuConfig)
		if !ok {
			return nil, fmt.Errorf("opaque config #%d for %s decodes to %T, not a %s", i, DriverName, obj, GpuConfigKind)
		}
		oc := opaqueConfig{requests: c.Requests, config: gc}
		switch c.Source {
		case resourceapi.AllocationConfigSourceClass:
			fromClass = append(fromClass, oc)
		case resourceapi.AllocationConfigSourceClaim:
			fromClaim = append(fromClaim, oc)
		default:
			return nil, fmt.Errorf("%s #%d has source %q, neither %s nor %s", GpuConfigKind, i, c.Source,
				resourceapi.AllocationConfigSourceClass, resourceapi.AllocationConfigSourceClaim)
		}
	}
	return append(fromClass, fromClaim...), nil
}

// configGroup is the results that one config applies to (config nil: no config names them).
type configGroup struct {
	config  *GpuConfig
	results []resourceapi.DeviceRequestAllocationResult
}

// requests are the group's requests, each once.
func (g configGroup) requests() []string {
	var out []string
	for _, r := range g.results {
		if !slices.Contains(out, r.Request) {
			out = append(out, r.Request)
		}
	}
	return out
}

// groupResults gives each result the config that takes effect for its request, the last of
// configs (weakest first) that names the request or names none, and groups the results by
// config, in the order the results come.
func groupResults(configs []opaqueConfig, results []resourceapi.DeviceRequestAllocationResult) []configGroup {
	effective := func(request string) *GpuConfig {
		for i := len(configs) - 1; i >= 0; i-- {
			if len(configs[i].requests) == 0 || slices.Contains(configs[i].requests, request) {
				return configs[i].config
			}
		}
		return nil
	}
	var groups []configGroup
	for _, r := range results {
		cfg := effective(r.Request)
		at := slices.IndexFunc(groups, func(g configGroup) bool { return g.config == cfg })
		if at < 0 {
			at = len(groups)
			groups = append(groups, configGroup{config: cfg})
		}
		groups[at].results = append(groups[at].results, r)
	}
	return groups
}

// smiRunner runs the nvidia-smi of the driver root with args (the tests run it in process).
type smiRunner func(args ...string) ([]byte, error)

// execSMI runs the driver root's nvidia-smi, as the real plugin does to change a GPU's mode;
// the stand-in finds the GPUs and their state below NVIDIA_SIM_ROOT, the container driver
// root.
func execSMI(path, root string) smiRunner {
	return func(args ...string) ([]byte, error) {
		cmd := exec.Command(path, args...)
		cmd.Env = append(os.Environ(), "NVIDIA_SIM_ROOT="+root)
		return cmd.CombinedOutput()
	}
}

// sharingManager applies a claim's sharing configs and undoes them.
type sharingManager struct {
	gates            FeatureGates
	smi              smiRunner
	controlFilesRoot string
	// For the MPS control daemons' Deployments (mps.go): the API client (the plugin's
	// ServiceAccount), the plugin's namespace and node, the daemon image, the host driver
	// root the daemon mounts, the faults, and the pace of the wait for a new daemon.
	client         kubernetes.Interface
	namespace      string
	nodeName       string
	imageName      string
	hostDriverRoot string
	faults         Faults
	readyBackoff   wait.Backoff
}

func newSharingManager(cfg *Config, lib *DeviceLib) *sharingManager {
	return &sharingManager{
		gates:            cfg.FeatureGates,
		smi:              execSMI(lib.nvidiaSMIPath, lib.containerDriverRoot),
		controlFilesRoot: filepath.Join(cfg.DriverPluginPath(), "mps"),
		client:           cfg.Client,
		namespace:        cfg.Namespace,
		nodeName:         cfg.NodeName,
		imageName:        cfg.ImageName,
		hostDriverRoot:   cfg.HostDriverRoot,
		faults:           cfg.Faults,
		readyBackoff:     mpsReadyBackoff,
	}
}

// onEachGPU runs nvidia-smi once per GPU, with the arguments argv gives for its UUID.
func (m *sharingManager) onEachGPU(uuids []string, argv func(uuid string) []string) error {
	for _, u := range uuids {
		args := argv(u)
		if out, err := m.smi(args...); err != nil {
			klog.Errorf("nvidia-smi %s:\n%s", strings.Join(args, " "), out)
			return fmt.Errorf("nvidia-smi %s: %w", strings.Join(args, " "), err)
		}
	}
	return nil
}

// setComputeMode puts the GPUs in compute mode mode (DEFAULT, EXCLUSIVE_PROCESS).
func (m *sharingManager) setComputeMode(uuids []string, mode string) error {
	return m.onEachGPU(uuids, func(u string) []string { return []string{"-i", u, "-c", mode} })
}

// setTimeSlice puts the GPUs in compute mode DEFAULT and gives them interval's time slice.
func (m *sharingManager) setTimeSlice(uuids []string, interval TimeSliceInterval) error {
	if err := m.setComputeMode(uuids, "DEFAULT"); err != nil {
		return err
	}
	level, _ := interval.level()
	return m.onEachGPU(uuids, func(u string) []string {
		return []string{"compute-policy", "-i", u, "--set-timeslice", strconv.Itoa(level)}
	})
}

// mpsDaemonID names the daemon of an MPS group: the claim's UID and 5 hex digits of a hash of
// the group's GPUs, so each group of a claim has its own (the real driver's Deployment
// names have this shape).
func mpsDaemonID(claimUID string, uuids []string) string {
	sum := sha256.Sum256([]byte(strings.Join(uuids, ",")))
	return claimUID + "-" + hex.EncodeToString(sum[:3])[:5]
}

// MpsPipeContainerPath is where a claim's containers find the daemon's pipe directory (the
// real driver's CUDA_MPS_PIPE_DIRECTORY for them).
const MpsPipeContainerPath = "/tmp/nvidia-mps"

func (m *sharingManager) mpsDirs(id string) (root, pipe, shm, log string) {
	root = filepath.Join(m.controlFilesRoot, id)
	return root, filepath.Join(root, "pipe"), filepath.Join(root, "shm"), filepath.Join(root, "log")
}

// startMps starts the daemon id for the GPUs unless its Deployment exists (a prepare retried
// after the wait for it timed out): its directories, the GPUs in EXCLUSIVE_PROCESS, then its
// Deployment (mps.go).
func (m *sharingManager) startMps(ctx context.Context, id string, uuids []string, config *MpsConfig) error {
	if m.client == nil {
		return fmt.Errorf("no API client to create MPS control daemon %s with", mpsDaemonName(id))
	}
	exists, err := m.daemonExists(ctx, id)
	if err != nil || exists {
		return err
	}
	settings, err := mpsSettings(config, uuids)
	if err != nil {
		return err
	}
	_, pipe, shm, logDir := m.mpsDirs(id)
	for _, d := range []string{pipe, shm, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("MPS control daemon %s: %w", mpsDaemonName(id), err)
		}
	}
	if err := m.setComputeMode(uuids, "EXCLUSIVE_PROCESS"); err != nil {
		return err
	}
	klog.Infof("MPS control daemon %s: creating its Deployment for %v with settings %q", mpsDaemonName(id), uuids, settings)
	return m.createDaemon(ctx, m.daemonDeployment(id, uuids, settings))
}

// stopMps deletes the daemon's Deployment and directories; a daemon that never got its
// directories was never started, and there is nothing to stop.
func (m *sharingManager) stopMps(ctx context.Context, id string) error {
	root, _, _, _ := m.mpsDirs(id)
	if _, err := os.Stat(root); os.IsNotExist(err) {
		return nil
	}
	klog.Infof("MPS control daemon %s: stopping it", mpsDaemonName(id))
	if m.client != nil {
		if err := m.deleteDaemon(ctx, id); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(root); err != nil {
		return fmt.Errorf("MPS control daemon %s: %w", mpsDaemonName(id), err)
	}
	return nil
}

// mpsEdits are the container edits each device of an MPS group gets: the daemon's shm and
// pipe directories, and the variable that points CUDA at the pipe.
func (m *sharingManager) mpsEdits(id string) cdispec.ContainerEdits {
	_, pipe, shm, _ := m.mpsDirs(id)
	rw := []string{"rw", "nosuid", "nodev", "bind"}
	return cdispec.ContainerEdits{
		Env: []string{"CUDA_MPS_PIPE_DIRECTORY=" + MpsPipeContainerPath},
		Mounts: []*cdispec.Mount{
			{ContainerPath: "/dev/shm", HostPath: shm, Options: slices.Clone(rw)},
			{ContainerPath: MpsPipeContainerPath, HostPath: pipe, Options: slices.Clone(rw)},
		},
	}
}

// apply does what a checked group's config asks to its GPUs.
func (m *sharingManager) apply(claim *resourceapi.ResourceClaim, g configGroup, uuidOf func(string) string) (SharingState, error) {
	if g.config == nil || g.config.Sharing == nil {
		return SharingState{}, nil
	}
	var uuids []string
	for _, r := range g.results {
		if u := uuidOf(r.Device); !slices.Contains(uuids, u) {
			uuids = append(uuids, u)
		}
	}
	s := g.config.Sharing
	switch s.Strategy {
	case TimeSlicingStrategy:
		klog.V(6).Infof("Time slice %s on %v", s.timeSlice(), uuids)
		if err := m.setTimeSlice(uuids, s.timeSlice()); err != nil {
			return SharingState{}, fmt.Errorf("time slice %s on %v: %w", s.timeSlice(), uuids, err)
		}
		return SharingState{TimeSliceApplied: true}, nil
	case MpsStrategy:
		id := mpsDaemonID(string(claim.UID), uuids)
		// The kubelet's call brings no deadline this far: the API calls are bounded by the
		// client's timeouts, the wait by its backoff.
		ctx := context.Background()
		if err := m.startMps(ctx, id, uuids, s.MpsConfig); err != nil {
			return SharingState{}, err
		}
		if err := m.waitDaemonReady(ctx, id); err != nil {
			return SharingState{}, err
		}
		return SharingState{MpsControlDaemonID: id}, nil
	}
	return SharingState{}, nil
}

// prepareSharing decodes the claim's configs, checks and applies each group's: the sharing
// state of each result's device, by device name.  An error names the GpuConfig's requests.
func (m *sharingManager) prepareSharing(claim *resourceapi.ResourceClaim, results []resourceapi.DeviceRequestAllocationResult,
	uuidOf func(string) string) (map[string]SharingState, error) {
	configs, err := driverConfigs(claim.Status.Allocation)
	if err != nil {
		return nil, err
	}
	out := map[string]SharingState{}
	for _, g := range groupResults(configs, results) {
		if g.config != nil {
			if err := g.config.check(m.gates); err != nil {
				return nil, fmt.Errorf("%s for requests %v refused: %w", GpuConfigKind, g.requests(), err)
			}
		}
		state, err := m.apply(claim, g, uuidOf)
		if err != nil {
			return nil, fmt.Errorf("%s for requests %v not applied: %w", GpuConfigKind, g.requests(), err)
		}
		for _, r := range g.results {
			out[r.Device] = state
		}
	}
	return out, nil
}

// unprepareSharing undoes what prepareSharing did to these devices: it stops their MPS
// daemons and sets the time slice of the GPUs a TimeSlicing config changed back to Default
// (each only while its gate is on, as the real driver does).
func (m *sharingManager) unprepareSharing(devices []heldDevice) error {
	var daemons, sliced []string
	for _, d := range devices {
		if d.Sharing == nil {
			continue
		}
		if id := d.Sharing.MpsControlDaemonID; id != "" && !slices.Contains(daemons, id) {
			daemons = append(daemons, id)
		}
		if d.Sharing.TimeSliceApplied && !slices.Contains(sliced, d.UUID) {
			sliced = append(sliced, d.UUID)
		}
	}
	if m.gates.Enabled(FeatureMPSSupport) {
		for _, id := range daemons {
			if err := m.stopMps(context.Background(), id); err != nil {
				return err
			}
		}
	}
	if m.gates.Enabled(FeatureTimeSlicingSettings) && len(sliced) > 0 {
		if err := m.setTimeSlice(sliced, DefaultTimeSlice); err != nil {
			return fmt.Errorf("time slice back to %s on %v: %w", DefaultTimeSlice, sliced, err)
		}
	}
	return nil
}

// addDeviceEdits appends each device's extra edits (MPS) to its entry in the claim's spec.
func addDeviceEdits(spec *cdispec.Spec, claimUID string, edits map[string]cdispec.ContainerEdits) {
	for i := range spec.Devices {
		e, ok := edits[strings.TrimPrefix(spec.Devices[i].Name, claimUID+"-")]
		if !ok {
			continue
		}
		d := &spec.Devices[i].ContainerEdits
		d.Env = append(d.Env, e.Env...)
		d.Mounts = append(d.Mounts, e.Mounts...)
	}
}
