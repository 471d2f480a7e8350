package plugin

// GPU sharing: the opaque claim configuration of kind GpuConfig (apiVersion
// resource.nvidia.com/v1beta1) and what preparing a claim with it does, as upstream
// kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 does it (api/nvidia.com/resource/v1beta1
// gpuconfig.go, sharing.go, validate.go, api.go; cmd/gpu-kubelet-plugin device_state.go
// prepareDevices/applySharingConfig/unprepareDevices, sharing.go).  The API types are
// re-implemented here (NVIDIA's Go modules are not available to the bed's build), with the
// same JSON, the same strict decoding (apimachinery's JSON serializer, Strict: true) and the
// same error wording, so a claim's events read as on a cluster running the real driver.
//
// What preparation does, per group of results sharing one config:
//
//   - TimeSlicing (feature gate TimeSlicingSettings): `nvidia-smi -i <uuid> -c DEFAULT` and
//     `nvidia-smi compute-policy -i <uuid> --set-timeslice <0..3>` on each GPU, reset to
//     level 0 (Default) on unprepare.  No container edits.
//   - MPS (feature gate MPSSupport): control files under <plugin dir>/mps/<claimUID>-<hash>
//     (shm, pipe, log), `nvidia-smi -i <uuid> -c EXCLUSIVE_PROCESS`, the control daemon, and the
//     container edits CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps plus rw bind mounts of the pipe
//     directory at /tmp/nvidia-mps and the shm directory at /dev/shm on each device of the
//     group; unprepare stops the daemon and removes the files.
//
// What is simulated: the GPUs' state (nvidia-smi stand-in, nvmlsim.GPUState) and the MPS
// control daemon's binary.  The daemon itself is started as upstream starts it: a Deployment
// per MPS config group, created through the API server and waited for (mps.go); its container
// runs the driver root's nvidia-cuda-mps-control, which on the bed is the stand-in
// (internal/mpscontrol) that creates the daemon's named pipe `control` in the pipe directory
// and logs the commands it is given to log/control.log.  The shm directory is a plain
// directory, not a tmpfs mount.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	stdjson "encoding/json"
	"errors"
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

// The configuration API group (upstream api.go).
const (
	ConfigGroupName = "resource.nvidia.com"
	ConfigVersion   = "v1beta1"
	GpuConfigKind   = "GpuConfig"
)

// Sharing strategies and time-slice intervals (upstream sharing.go).
const (
	TimeSlicingStrategy = "TimeSlicing"
	MpsStrategy         = "MPS"

	DefaultTimeSlice TimeSliceInterval = "Default"
	ShortTimeSlice   TimeSliceInterval = "Short"
	MediumTimeSlice  TimeSliceInterval = "Medium"
	LongTimeSlice    TimeSliceInterval = "Long"
)

// Feature gates the chart sets through FEATURE_GATES (upstream pkg/featuregates: both alpha,
// off by default).
const (
	FeatureTimeSlicingSettings = "TimeSlicingSettings"
	FeatureMPSSupport          = "MPSSupport"
)

// FeatureGates are the gates set on, by name.
type FeatureGates map[string]bool

// Enabled reports whether gate is on.
func (g FeatureGates) Enabled(gate string) bool { return g[gate] }

// ParseFeatureGates reads FEATURE_GATES as the chart renders it: "A=true,B=false," (a
// trailing comma, as the chart's template leaves it, is fine).
func ParseFeatureGates(value string) (FeatureGates, error) {
	out := FeatureGates{}
	for _, part := range strings.Split(value, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("missing bool value for %s", name)
		}
		on, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("invalid value of %s=%s, err: %w", name, v, err)
		}
		out[strings.TrimSpace(name)] = on
	}
	return out, nil
}

// GpuConfig holds the set of parameters for configuring a GPU (upstream gpuconfig.go).
type GpuConfig struct {
	metav1.TypeMeta `json:",inline"`
	Sharing         *GpuSharing `json:"sharing,omitempty"`
}

// GpuSharingStrategy, TimeSliceInterval: see upstream sharing.go.
type GpuSharingStrategy string

// TimeSliceInterval encodes the valid timeslice duration as a string.
type TimeSliceInterval string

// MpsPerDevicePinnedMemoryLimit maps a device index or UUID to a limit.
type MpsPerDevicePinnedMemoryLimit map[string]resource.Quantity

// GpuSharing holds the current sharing strategy for GPUs and its settings.
type GpuSharing struct {
	Strategy          GpuSharingStrategy `json:"strategy"`
	TimeSlicingConfig *TimeSlicingConfig `json:"timeSlicingConfig,omitempty"`
	MpsConfig         *MpsConfig         `json:"mpsConfig,omitempty"`
}

// TimeSlicingConfig provides the settings for CUDA time-slicing.
type TimeSlicingConfig struct {
	Interval *TimeSliceInterval `json:"interval,omitempty"`
}

// MpsConfig provides the configuration of an MPS control daemon.
type MpsConfig struct {
	DefaultActiveThreadPercentage     *int                          `json:"defaultActiveThreadPercentage,omitempty"`
	DefaultPinnedDeviceMemoryLimit    *resource.Quantity            `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
	DefaultPerDevicePinnedMemoryLimit MpsPerDevicePinnedMemoryLimit `json:"defaultPerDevicePinnedMemoryLimit,omitempty"`
}

// DeepCopyObject makes GpuConfig a runtime.Object (upstream's is generated).
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

// DefaultGpuConfig is the config of results no claim or class config names.
func DefaultGpuConfig() *GpuConfig {
	return &GpuConfig{TypeMeta: metav1.TypeMeta{APIVersion: ConfigGroupName + "/" + ConfigVersion, Kind: GpuConfigKind}}
}

// StrictDecoder fails on unknown fields, as upstream's (api.go) does for opaque claim config.
var StrictDecoder runtime.Decoder

func init() {
	scheme := runtime.NewScheme()
	gv := schema.GroupVersion{Group: ConfigGroupName, Version: ConfigVersion}
	scheme.AddKnownTypes(gv, &GpuConfig{})
	metav1.AddToGroupVersion(scheme, gv)
	StrictDecoder = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme,
		json.SerializerOptions{Strict: true})
}

// IsTimeSlicing and IsMps: which strategy is selected.
func (s *GpuSharing) IsTimeSlicing() bool { return s != nil && s.Strategy == TimeSlicingStrategy }

// IsMps reports whether the MPS strategy is selected.
func (s *GpuSharing) IsMps() bool { return s != nil && s.Strategy == MpsStrategy }

// GetTimeSlicingConfig returns the time-slicing config of a TimeSlicing strategy.
func (s *GpuSharing) GetTimeSlicingConfig() (*TimeSlicingConfig, error) {
	if s == nil {
		return nil, fmt.Errorf("no sharing set to get config from")
	}
	if s.Strategy != TimeSlicingStrategy {
		return nil, fmt.Errorf("strategy is not set to '%v'", TimeSlicingStrategy)
	}
	if s.MpsConfig != nil {
		return nil, fmt.Errorf("cannot use MpsConfig with the '%v' strategy", TimeSlicingStrategy)
	}
	return s.TimeSlicingConfig, nil
}

// GetMpsConfig returns the MPS config of an MPS strategy.
func (s *GpuSharing) GetMpsConfig() (*MpsConfig, error) {
	if s == nil {
		return nil, fmt.Errorf("no sharing set to get config from")
	}
	if s.Strategy != MpsStrategy {
		return nil, fmt.Errorf("strategy is not set to '%v'", MpsStrategy)
	}
	if s.TimeSlicingConfig != nil {
		return nil, fmt.Errorf("cannot use TimeSlicingConfig with the '%v' strategy", MpsStrategy)
	}
	return s.MpsConfig, nil
}

// Int is the compute-policy level of an interval (-1 for an unknown one).
func (t TimeSliceInterval) Int() int {
	switch t {
	case DefaultTimeSlice:
		return 0
	case ShortTimeSlice:
		return 1
	case MediumTimeSlice:
		return 2
	case LongTimeSlice:
		return 3
	}
	return -1
}

// Normalize sets the defaults a strategy implies (upstream gpuconfig.go).
func (c *GpuConfig) Normalize(gates FeatureGates) {
	if c.Sharing == nil {
		return
	}
	if gates.Enabled(FeatureTimeSlicingSettings) && c.Sharing.Strategy == TimeSlicingStrategy && c.Sharing.TimeSlicingConfig == nil {
		interval := DefaultTimeSlice
		c.Sharing.TimeSlicingConfig = &TimeSlicingConfig{Interval: &interval}
	}
	if gates.Enabled(FeatureMPSSupport) && c.Sharing.Strategy == MpsStrategy && c.Sharing.MpsConfig == nil {
		c.Sharing.MpsConfig = &MpsConfig{}
	}
}

const (
	gpuSharingFeatureGateError = "%q is selected as the GPU sharing strategy, but the %q feature gate is not enabled"
	gpuSharingUnknownStrategy  = "unknown GPU sharing strategy: %v, supported GPU sharing strategies: %s, %s"
)

// Validate is upstream's validate.go for GpuConfig, word for word.
func (c *GpuConfig) Validate(gates FeatureGates) error {
	if c.Sharing == nil {
		return nil
	}
	s := c.Sharing
	switch string(s.Strategy) {
	case TimeSlicingStrategy:
		if !gates.Enabled(FeatureTimeSlicingSettings) {
			return fmt.Errorf(gpuSharingFeatureGateError, TimeSlicingStrategy, FeatureTimeSlicingSettings)
		}
	case MpsStrategy:
		if !gates.Enabled(FeatureMPSSupport) {
			return fmt.Errorf(gpuSharingFeatureGateError, MpsStrategy, FeatureMPSSupport)
		}
	default:
		return fmt.Errorf(gpuSharingUnknownStrategy, s.Strategy, TimeSlicingStrategy, MpsStrategy)
	}
	switch {
	case s.IsTimeSlicing():
		// Upstream dereferences a missing interval ({timeSlicingConfig: {}}) and panics; here
		// it is refused like an unknown interval.
		var interval TimeSliceInterval
		if s.TimeSlicingConfig != nil && s.TimeSlicingConfig.Interval != nil {
			interval = *s.TimeSlicingConfig.Interval
		}
		if interval.Int() < 0 {
			return fmt.Errorf("unknown time-slice interval: %v, supported time-slice intervals: %s, %s, %s, %s",
				interval, DefaultTimeSlice, ShortTimeSlice, MediumTimeSlice, LongTimeSlice)
		}
	case s.IsMps():
		if m := s.MpsConfig; m != nil && m.DefaultActiveThreadPercentage != nil {
			if *m.DefaultActiveThreadPercentage < 0 {
				return fmt.Errorf("active thread percentage must not be negative")
			}
			if *m.DefaultActiveThreadPercentage > 100 {
				return fmt.Errorf("active thread percentage must not be greater than 100")
			}
		}
	}
	return nil
}

// ErrInvalidDeviceSelector and ErrInvalidLimit: upstream sharing.go.
var (
	ErrInvalidDeviceSelector = errors.New("invalid device")
	ErrInvalidLimit          = errors.New("invalid limit")
)

// NormalizeLimits is upstream's MpsPerDevicePinnedMemoryLimit.Normalize: per-device limits in
// whole MiB ("10240M"), the default applied to every device, then overridden by index or UUID.
func (m MpsPerDevicePinnedMemoryLimit) NormalizeLimits(uuids []string, def *resource.Quantity) (map[string]string, error) {
	limits := map[string]string{}
	megabyte := func(q resource.Quantity) (string, bool) {
		v := q.Value() / 1024 / 1024
		return fmt.Sprintf("%vM", v), v > 0
	}
	if def != nil && len(uuids) > 0 {
		mb, ok := megabyte(*def)
		if !ok {
			return nil, fmt.Errorf("%w: default value set too low: %v", ErrInvalidLimit, def)
		}
		for _, u := range uuids {
			limits[u] = mb
		}
	}
	for k, v := range m {
		id := k
		if !slices.Contains(uuids, k) {
			index, err := strconv.Atoi(k)
			if err != nil {
				return nil, fmt.Errorf("%w: unable to parse key as an integer: %v", ErrInvalidDeviceSelector, k)
			}
			if index < 0 || index >= len(uuids) {
				return nil, fmt.Errorf("%w: invalid device index: %v", ErrInvalidDeviceSelector, index)
			}
			id = uuids[index]
		}
		mb, ok := megabyte(v)
		if !ok {
			return nil, fmt.Errorf("%w: value set too low: %v: %v", ErrInvalidLimit, k, v.String())
		}
		limits[id] = mb
	}
	return limits, nil
}

// SharingState is what a config did to one prepared device (upstream DeviceConfigState).
type SharingState struct {
	TimeSliceApplied   bool   `json:"timeSliceApplied,omitempty"`
	MpsControlDaemonID string `json:"mpsControlDaemonID,omitempty"`
}

// configGroup is the results one config applies to.
type configGroup struct {
	config  *GpuConfig
	results []resourceapi.DeviceRequestAllocationResult
}

// opaqueConfig is one decoded config with the requests it names (empty: all).
type opaqueConfig struct {
	requests []string
	config   *GpuConfig
}

// getOpaqueDeviceConfigs is upstream's GetOpaqueDeviceConfigs: class configs first, then the
// claim's, each of this driver decoded strictly.
func getOpaqueDeviceConfigs(possible []resourceapi.DeviceAllocationConfiguration) ([]opaqueConfig, error) {
	var class, claim []resourceapi.DeviceAllocationConfiguration
	for _, c := range possible {
		switch c.Source {
		case resourceapi.AllocationConfigSourceClass:
			class = append(class, c)
		case resourceapi.AllocationConfigSourceClaim:
			claim = append(claim, c)
		default:
			return nil, fmt.Errorf("invalid config source: %v", c.Source)
		}
	}
	var out []opaqueConfig
	for _, c := range append(class, claim...) {
		if c.Opaque == nil {
			return nil, fmt.Errorf("only opaque parameters are supported by this driver")
		}
		if c.Opaque.Driver != DriverName {
			continue
		}
		decoded, err := runtime.Decode(StrictDecoder, c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("error decoding config parameters: %w", err)
		}
		gpuConfig, ok := decoded.(*GpuConfig)
		if !ok {
			return nil, fmt.Errorf("runtime object is not a recognized configuration")
		}
		out = append(out, opaqueConfig{requests: c.Requests, config: gpuConfig})
	}
	return out, nil
}

// groupByConfig picks each result's config as upstream's prepareDevices does: the last config
// naming the result's request, else the last naming no request, else the default.
func groupByConfig(allocation *resourceapi.AllocationResult, results []resourceapi.DeviceRequestAllocationResult) ([]configGroup, error) {
	configs, err := getOpaqueDeviceConfigs(allocation.Devices.Config)
	if err != nil {
		return nil, fmt.Errorf("error getting opaque device configs: %v", err)
	}
	configs = slices.Insert(configs, 0, opaqueConfig{requests: []string{}, config: DefaultGpuConfig()})
	var groups []configGroup
	index := map[*GpuConfig]int{}
	for _, r := range results {
		for _, c := range slices.Backward(configs) {
			if slices.Contains(c.requests, r.Request) || len(c.requests) == 0 {
				i, ok := index[c.config]
				if !ok {
					i = len(groups)
					index[c.config] = i
					groups = append(groups, configGroup{config: c.config})
				}
				groups[i].results = append(groups[i].results, r)
				break
			}
		}
	}
	return groups, nil
}

// smiRunner runs the nvidia-smi of the driver root with args (the tests run it in process).
type smiRunner func(args ...string) ([]byte, error)

// execSMI runs nvidia-smi as upstream does (exec of the driver root's binary); the stand-in
// finds the GPUs and their state below NVIDIA_SIM_ROOT, the container driver root.
func execSMI(path, root string) smiRunner {
	return func(args ...string) ([]byte, error) {
		cmd := exec.Command(path, args...)
		cmd.Env = append(os.Environ(), "NVIDIA_SIM_ROOT="+root)
		return cmd.CombinedOutput()
	}
}

// sharingManager applies and undoes sharing configs (upstream TimeSlicingManager and
// MpsManager).
type sharingManager struct {
	gates            FeatureGates
	smi              smiRunner
	controlFilesRoot string
	// For the MPS control daemon's Deployment (mps.go): the API client (the plugin's
	// ServiceAccount), its namespace, node, image, the host driver root it mounts, the
	// container driver root (to look for dev/shm as upstream does) and the faults.
	client              kubernetes.Interface
	namespace           string
	nodeName            string
	imageName           string
	hostDriverRoot      string
	containerDriverRoot string
	faults              Faults
	readyBackoff        wait.Backoff
}

func newSharingManager(cfg *Config, lib *DeviceLib) *sharingManager {
	return &sharingManager{
		gates:               cfg.FeatureGates,
		smi:                 execSMI(lib.nvidiaSMIPath, lib.containerDriverRoot),
		controlFilesRoot:    filepath.Join(cfg.DriverPluginPath(), "mps"),
		client:              cfg.Client,
		namespace:           cfg.Namespace,
		nodeName:            cfg.NodeName,
		imageName:           cfg.ImageName,
		hostDriverRoot:      cfg.HostDriverRoot,
		containerDriverRoot: cfg.ContainerDriverRoot,
		faults:              cfg.Faults,
		readyBackoff:        mpsReadyBackoff,
	}
}

func (m *sharingManager) run(args ...string) error {
	out, err := m.smi(args...)
	if err != nil {
		klog.Errorf("\n%v", string(out))
		return fmt.Errorf("error running nvidia-smi: %w", err)
	}
	return nil
}

func (m *sharingManager) setComputeMode(uuids []string, mode string) error {
	for _, u := range uuids {
		if err := m.run("-i", u, "-c", mode); err != nil {
			return err
		}
	}
	return nil
}

// setTimeSlice is upstream's TimeSlicingManager.SetTimeSlice.
func (m *sharingManager) setTimeSlice(uuids []string, interval TimeSliceInterval) error {
	if err := m.setComputeMode(uuids, "DEFAULT"); err != nil {
		return fmt.Errorf("error setting compute mode: %w", err)
	}
	for _, u := range uuids {
		if err := m.run("compute-policy", "-i", u, "--set-timeslice", strconv.Itoa(interval.Int())); err != nil {
			return fmt.Errorf("error setting time slice: %w", err)
		}
	}
	return nil
}

// mpsDaemonID is upstream's GetMpsControlDaemonID: the claim UID and a hash of the UUIDs.
func mpsDaemonID(claimUID string, uuids []string) string {
	hash := sha256.Sum256([]byte(strings.Join(uuids, ",")))
	return fmt.Sprintf("%s-%s", claimUID, hex.EncodeToString(hash[:])[:5])
}

// MpsPipeContainerPath is where containers find the MPS pipe directory (upstream).
const MpsPipeContainerPath = "/tmp/nvidia-mps"

func (m *sharingManager) mpsDirs(id string) (root, pipe, shm, log string) {
	root = filepath.Join(m.controlFilesRoot, id)
	return root, filepath.Join(root, "pipe"), filepath.Join(root, "shm"), filepath.Join(root, "log")
}

// startMps is upstream's MpsControlDaemon.Start: nothing when the daemon's Deployment exists
// (a retried prepare), else the control directories, the GPUs in EXCLUSIVE_PROCESS and the
// Deployment (mps.go).
func (m *sharingManager) startMps(ctx context.Context, id string, uuids []string, config *MpsConfig) error {
	if m.client == nil {
		return fmt.Errorf("failed to get deployment: no API client")
	}
	started, err := m.daemonStarted(ctx, id)
	if err != nil {
		return fmt.Errorf("error checking if control daemon already started: %w", err)
	}
	if started {
		return nil
	}
	klog.Infof("Starting MPS control daemon for '%v', with settings: %+v", id, config)
	var activeThreads string
	var limits map[string]string
	if config != nil && config.DefaultActiveThreadPercentage != nil {
		activeThreads = fmt.Sprintf("%d", *config.DefaultActiveThreadPercentage)
	}
	if config != nil {
		if limits, err = config.DefaultPerDevicePinnedMemoryLimit.NormalizeLimits(uuids, config.DefaultPinnedDeviceMemoryLimit); err != nil {
			return fmt.Errorf("error transforming DefaultPerDevicePinnedMemoryLimit into string: %w", err)
		}
	}
	deployment, err := m.mpsDeployment(id, uuids, activeThreads, limits)
	if err != nil {
		return err
	}
	_, pipe, shm, logDir := m.mpsDirs(id)
	for _, d := range []string{shm, pipe, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("error creating directory %v: %w", d, err)
		}
	}
	if err := m.setComputeMode(uuids, "EXCLUSIVE_PROCESS"); err != nil {
		return fmt.Errorf("error setting compute mode: %w", err)
	}
	return m.createMpsDaemon(ctx, deployment)
}

// stopMps is upstream's MpsControlDaemon.Stop: a daemon never started (no control directory)
// is no error; else its Deployment is deleted and the directory removed.
func (m *sharingManager) stopMps(ctx context.Context, id string) error {
	root, _, _, _ := m.mpsDirs(id)
	if _, err := os.Stat(root); os.IsNotExist(err) {
		return nil
	}
	klog.Infof("Stopping MPS control daemon for '%v'", id)
	if m.client != nil {
		if err := m.deleteMpsDaemon(ctx, id); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(root); err != nil {
		return fmt.Errorf("error removing directory %v: %w", root, err)
	}
	return nil
}

// mpsEdits are upstream's MpsControlDaemon.GetCDIContainerEdits, added to each device of the group.
func (m *sharingManager) mpsEdits(id string) cdispec.ContainerEdits {
	_, pipe, shm, _ := m.mpsDirs(id)
	return cdispec.ContainerEdits{
		Env: []string{"CUDA_MPS_PIPE_DIRECTORY=" + MpsPipeContainerPath},
		Mounts: []*cdispec.Mount{
			{ContainerPath: "/dev/shm", HostPath: shm, Options: []string{"rw", "nosuid", "nodev", "bind"}},
			{ContainerPath: MpsPipeContainerPath, HostPath: pipe, Options: []string{"rw", "nosuid", "nodev", "bind"}},
		},
	}
}

// apply is upstream's applySharingConfig for one group: what it did, per device name.
func (m *sharingManager) apply(claim *resourceapi.ResourceClaim, g configGroup, uuidOf func(string) string) (SharingState, error) {
	var state SharingState
	sharing := g.config.Sharing
	var requests, uuids []string
	for _, r := range g.results {
		requests = append(requests, r.Request)
		if u := uuidOf(r.Device); !slices.Contains(uuids, u) {
			uuids = append(uuids, u)
		}
	}
	if m.gates.Enabled(FeatureTimeSlicingSettings) && sharing.IsTimeSlicing() {
		tsc, err := sharing.GetTimeSlicingConfig()
		if err != nil {
			return state, fmt.Errorf("error getting timeslice config for requests '%v' in claim '%v': %w", requests, claim.UID, err)
		}
		if tsc != nil {
			klog.V(6).Infof("SetTimeSlice() for full GPUs with UUIDs: %s", uuids)
			if err := m.setTimeSlice(uuids, *tsc.Interval); err != nil {
				return state, fmt.Errorf("error setting timeslice config for requests '%v' in claim '%v': %w", requests, claim.UID, err)
			}
			state.TimeSliceApplied = true
		}
	}
	if m.gates.Enabled(FeatureMPSSupport) && sharing.IsMps() {
		mpsc, err := sharing.GetMpsConfig()
		if err != nil {
			return state, fmt.Errorf("error getting MPS configuration: %w", err)
		}
		id := mpsDaemonID(string(claim.UID), uuids)
		// The kubelet's call carries no deadline down here; the API calls are bounded by the
		// client's timeouts and the readiness wait by its backoff.
		ctx := context.Background()
		if err := m.startMps(ctx, id, uuids, mpsc); err != nil {
			return state, fmt.Errorf("error starting MPS control daemon: %w", err)
		}
		if err := m.assertMpsReady(ctx, id); err != nil {
			return state, fmt.Errorf("MPS control daemon is not yet ready: %w", err)
		}
		state.MpsControlDaemonID = id
	}
	return state, nil
}

// prepareSharing decodes, normalizes, validates and applies the claim's configs, as upstream's
// prepareDevices: the state of each result's device, by device name.
func (m *sharingManager) prepareSharing(claim *resourceapi.ResourceClaim, results []resourceapi.DeviceRequestAllocationResult,
	uuidOf func(string) string) (map[string]SharingState, error) {
	groups, err := groupByConfig(claim.Status.Allocation, results)
	if err != nil {
		return nil, err
	}
	out := map[string]SharingState{}
	for _, g := range groups {
		g.config.Normalize(m.gates)
		if err := g.config.Validate(m.gates); err != nil {
			return nil, fmt.Errorf("error validating GPU config: %w", err)
		}
		state, err := m.apply(claim, g, uuidOf)
		if err != nil {
			return nil, fmt.Errorf("error applying config: %w", err)
		}
		for _, r := range g.results {
			out[r.Device] = state
		}
	}
	return out, nil
}

// unprepareSharing is the sharing part of upstream's unprepareDevices: stop the MPS daemons,
// reset the time slice of GPUs a TimeSlicing config set.
func (m *sharingManager) unprepareSharing(devices []PreparedDevice) error {
	var ids, tsUUIDs []string
	for _, d := range devices {
		if d.Sharing == nil {
			continue
		}
		if id := d.Sharing.MpsControlDaemonID; id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
		if d.Sharing.TimeSliceApplied && !slices.Contains(tsUUIDs, d.UUID) {
			tsUUIDs = append(tsUUIDs, d.UUID)
		}
	}
	if m.gates.Enabled(FeatureMPSSupport) {
		for _, id := range ids {
			if err := m.stopMps(context.Background(), id); err != nil {
				return fmt.Errorf("error stopping MPS control daemon: %w", err)
			}
		}
	}
	if m.gates.Enabled(FeatureTimeSlicingSettings) && len(tsUUIDs) > 0 {
		if err := m.setTimeSlice(tsUUIDs, DefaultTimeSlice); err != nil {
			return fmt.Errorf("error setting timeslice for devices: %w", err)
		}
	}
	return nil
}

// addDeviceEdits appends each device's extra edits (MPS) to its entry in the claim's spec, as
// upstream's CreateClaimSpecFile does with a group's container edits.
func addDeviceEdits(spec *cdispec.Spec, claimUID string, edits map[string]cdispec.ContainerEdits) {
	for i := range spec.Devices {
		name := strings.TrimPrefix(spec.Devices[i].Name, claimUID+"-")
		e, ok := edits[name]
		if !ok {
			continue
		}
		d := &spec.Devices[i].ContainerEdits
		d.Env = append(d.Env, e.Env...)
		d.Mounts = append(d.Mounts, e.Mounts...)
	}
}
