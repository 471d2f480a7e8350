package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"draconf.local/testbed/gpu-driver/internal/nvmlsim"
)

// Driver is the DRA kubelet plugin (upstream cmd/gpu-kubelet-plugin/driver.go).
type Driver struct {
	cfg    *Config
	client kubernetes.Interface
	lib    *DeviceLib
	state  *DeviceState
	helper *kubeletplugin.Helper
	health *healthcheck
	// pulock keeps prepare and unprepare from interleaving (upstream uses a node-global
	// flock, pu.lock, in the plugin directory; one process per node makes a mutex enough).
	pulock sync.Mutex
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// SimulatedNVMLInitError is what the crash fault fails with: NVML cannot initialise, as
// after a driver upgrade without reboot.  Upstream's error chain for a failed
// nvmlInitWithFlags (main.go RunPlugin -> NewDriver -> NewDeviceState ->
// enumerateAllPossibleDevices -> GetPerGpuAllocatableDevices -> ensureNVML).
func SimulatedNVMLInitError() error {
	return errors.New("error creating driver: error enumerating all possible devices: " +
		"error enumerating allocatable devices: ensureNVML failed: Driver/library version mismatch")
}

// Run starts the plugin and serves until ctx is done.
func Run(ctx context.Context, cfg *Config, client kubernetes.Interface) error {
	if err := os.MkdirAll(cfg.DriverPluginPath(), 0o750); err != nil {
		return err
	}
	info, err := os.Stat(cfg.CDIRoot)
	switch {
	case os.IsNotExist(err):
		if err := os.MkdirAll(cfg.CDIRoot, 0o750); err != nil {
			return err
		}
	case err != nil:
		return err
	case !info.IsDir():
		return fmt.Errorf("path for cdi file generation is not a directory: '%v'", cfg.CDIRoot)
	}
	d, err := NewDriver(ctx, cfg, client)
	if err != nil {
		return fmt.Errorf("error creating driver: %w", err)
	}
	<-ctx.Done()
	if err := d.Shutdown(); err != nil {
		klog.Errorf("unable to cleanly shutdown driver: %v", err)
	}
	return nil
}

// NewDriver discovers the GPUs, registers with the kubelet and publishes the node's pool.
func NewDriver(ctx context.Context, cfg *Config, client kubernetes.Interface) (*Driver, error) {
	klog.Infof("Using devRoot=%v", cfg.ContainerDriverRoot)
	lib, err := NewDeviceLib(cfg.ContainerDriverRoot, cfg.Faults)
	if err != nil {
		return nil, fmt.Errorf("failed to create device library: %w", err)
	}
	// The simulated GPUs' state lives in the driver root (mounted read-write, as the chart's
	// gpus container mounts it); without it GPU sharing cannot be applied.
	if err := os.MkdirAll(nvmlsim.StateDir(cfg.ContainerDriverRoot), 0o755); err != nil {
		klog.Warningf("GPU state directory unavailable (is the driver root mounted read-only?): %v", err)
	}
	if lib.dynamicMIG = cfg.DynamicMIG; !cfg.DynamicMIG {
		lib.migs = nil
	}
	cdi, err := NewCDIHandler(cfg.CDIRoot, cfg.HostDriverRoot, cfg.ContainerDriverRoot, lib.nvidiaSMIPath)
	if err != nil {
		return nil, fmt.Errorf("unable to create CDI handler: %w", err)
	}
	cdi.simulate(cfg.Faults)
	cfg.Client = client // the MPS control daemons' Deployments are created with it
	state, err := NewDeviceState(cfg, lib, cdi)
	if err != nil {
		return nil, err
	}
	d := &Driver{cfg: cfg, client: client, lib: lib, state: state}
	for _, g := range lib.GPUs {
		klog.Infof("Found GPU %s (%s, %s)", g, g.ProductName, g.PCIBusID)
	}

	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(cfg.NodeName),
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.Serialize(false),
		kubeletplugin.RegistrarDirectoryPath(cfg.KubeletRegistrarDirectoryPath),
		kubeletplugin.PluginDataDirectoryPath(cfg.DriverPluginPath()),
	)
	if err != nil {
		return nil, err
	}
	d.helper = helper

	health, err := startHealthcheck(cfg, helper)
	if err != nil {
		helper.Stop()
		return nil, fmt.Errorf("start healthcheck: %w", err)
	}
	d.health = health

	if err := helper.PublishResources(ctx, lib.DriverResources(cfg.NodeName, cfg.Faults)); err != nil {
		d.Shutdown()
		return nil, err
	}
	klog.Infof("Publishing %d device(s) in pool %q (feature gates: %v; simulated faults: %s)", len(lib.GPUs),
		cfg.NodeName, cfg.FeatureGates, orNone(cfg.Faults.String()))
	return d, nil
}

// Shutdown stops the health service and the kubelet plugin helper.
func (d *Driver) Shutdown() error {
	if d == nil {
		return nil
	}
	if d.health != nil {
		d.health.Stop()
	}
	d.helper.Stop()
	return nil
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	if len(claims) == 0 {
		// That's probably the health check.
		klog.V(7).Infof("PrepareResourceClaims called with %d claim(s)", len(claims))
	}
	results := make(map[types.UID]kubeletplugin.PrepareResult)
	for _, claim := range claims {
		results[claim.UID] = d.nodePrepareResource(claim)
	}
	return results, nil
}

func (d *Driver) nodePrepareResource(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	d.pulock.Lock()
	defer d.pulock.Unlock()
	cs := ResourceClaimToString(claim)
	devs, err := d.state.Prepare(claim)
	if err != nil {
		klog.Errorf("Prepare failed for claim '%s': %v", cs, err)
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("error preparing devices for claim %s: %w", cs, err)}
	}
	klog.Infof("Returning newly prepared devices for claim '%s': %s", cs, d.describeDevices(devs))
	return kubeletplugin.PrepareResult{Devices: devs}
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, refs []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	results := make(map[types.UID]error)
	for _, ref := range refs {
		results[ref.UID] = d.nodeUnprepareResource(ref)
	}
	return results, nil
}

func (d *Driver) nodeUnprepareResource(ref kubeletplugin.NamespacedObject) error {
	d.pulock.Lock()
	defer d.pulock.Unlock()
	devs, found, err := d.state.Unprepare(ref)
	if err != nil {
		klog.Errorf("Unprepare failed for claim '%s': %v", ref.String(), err)
		return fmt.Errorf("error unpreparing devices for claim %v: %w", ref.String(), err)
	}
	if !found {
		klog.Infof("Unprepared claim '%s': not prepared on this node, nothing to do", ref.String())
		return nil
	}
	names := make([]string, 0, len(devs))
	for _, dev := range devs {
		names = append(names, fmt.Sprintf("%s (%s)", dev.DeviceName, dev.UUID))
	}
	klog.Infof("Unprepared devices for claim '%s': [%s]", ref.String(), strings.Join(names, ", "))
	return nil
}

// HandleError implements kubeletplugin.DRAPlugin, following the advice of the DRAPlugin API
// docs as upstream does.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	runtime.HandleErrorWithContext(ctx, err, msg)
}

func (d *Driver) describeDevices(devs []kubeletplugin.Device) string {
	parts := make([]string, 0, len(devs))
	for _, dev := range devs {
		uuid := ""
		if g := d.lib.ByName(dev.DeviceName); g != nil {
			uuid = " (" + g.UUID + ")"
		}
		ids := "no CDI device"
		if len(dev.CDIDeviceIDs) > 0 {
			ids = strings.Join(dev.CDIDeviceIDs, ",")
		}
		parts = append(parts, fmt.Sprintf("%s/%s%s request %s -> %s", dev.PoolName, dev.DeviceName, uuid,
			strings.Join(dev.Requests, ","), ids))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
