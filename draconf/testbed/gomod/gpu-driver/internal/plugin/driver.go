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

// Driver is the running kubelet plugin: registered with the kubelet, its pool published, its
// DRA service answering through the Preparer.
type Driver struct {
	cfg    *Config
	client kubernetes.Interface
	lib    *DeviceLib
	prep   *Preparer
	helper *kubeletplugin.Helper
	health *healthcheck
	// oneAtATime orders every prepare and unprepare of the node.  The real driver takes a
	// file lock (pu.lock in the plugin directory) for that; one plugin process per node makes
	// a mutex do.
	oneAtATime sync.Mutex
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// SimulatedNVMLInitError is what the crash fault stops the plugin with: NVML will not
// initialise, as on a node whose kernel module and user-space driver differ (a driver upgrade
// without a reboot).  nvidia-smi names that state "Driver/library version mismatch"; the
// real plugin fails the same way when it first asks NVML for the GPUs.
func SimulatedNVMLInitError() error {
	return errors.New("no GPUs to publish: NVML did not initialise: Driver/library version mismatch")
}

// Run serves the plugin until ctx is done, then stops it.
func Run(ctx context.Context, cfg *Config, client kubernetes.Interface) error {
	for _, dir := range []string{cfg.DriverPluginPath(), cfg.CDIRoot} {
		if err := ensureDir(dir); err != nil {
			return err
		}
	}
	d, err := NewDriver(ctx, cfg, client)
	if err != nil {
		return fmt.Errorf("starting the plugin: %w", err)
	}
	<-ctx.Done()
	return d.Shutdown()
}

// ensureDir makes dir if it is missing; an existing file of that name is an error.
func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	return nil
}

// NewDriver reads the node's GPUs, registers with the kubelet and publishes the node's pool.
func NewDriver(ctx context.Context, cfg *Config, client kubernetes.Interface) (*Driver, error) {
	klog.Infof("Reading the simulated GPUs under %s", cfg.ContainerDriverRoot)
	lib, err := NewDeviceLib(cfg.ContainerDriverRoot, cfg.Faults)
	if err != nil {
		return nil, fmt.Errorf("reading the GPUs: %w", err)
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
		return nil, fmt.Errorf("CDI spec writer for %s: %w", cfg.CDIRoot, err)
	}
	cdi.simulate(cfg.Faults)
	cfg.Client = client // the MPS control daemons' Deployments are created with it
	prep, err := NewPreparer(cfg, lib, cdi)
	if err != nil {
		return nil, err
	}
	for _, g := range lib.GPUs {
		klog.Infof("Found GPU %s (%s, %s)", g, g.ProductName, g.PCIBusID)
	}
	d := &Driver{cfg: cfg, client: client, lib: lib, prep: prep}

	d.helper, err = kubeletplugin.Start(ctx, d,
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
	if d.health, err = startHealthcheck(cfg, d.helper); err != nil {
		d.helper.Stop()
		return nil, fmt.Errorf("health service: %w", err)
	}
	if err := d.helper.PublishResources(ctx, lib.DriverResources(cfg.NodeName, cfg.Faults)); err != nil {
		d.Shutdown()
		return nil, err
	}
	klog.Infof("Publishing %d device(s) in pool %q (feature gates: %v; simulated faults: %s)", len(lib.GPUs),
		cfg.NodeName, cfg.FeatureGates, orNone(cfg.Faults.String()))
	return d, nil
}

// Shutdown stops what NewDriver started, the health service (nil-safe) first and then the
// helper: its gRPC services, its registration and its ResourceSlice controller.
func (d *Driver) Shutdown() error {
	d.health.Stop()
	d.helper.Stop()
	return nil
}

// PrepareResourceClaims is the kubelet's NodePrepareResources (kubeletplugin.DRAPlugin): each
// claim gets its own result.  The health service calls it with no claims.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	klog.V(6).Infof("NodePrepareResources: %d claim(s)", len(claims))
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		out[c.UID] = d.prepareOne(c)
	}
	return out, nil
}

func (d *Driver) prepareOne(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	d.oneAtATime.Lock()
	defer d.oneAtATime.Unlock()
	name := describeClaim(claim)
	devs, err := d.prep.Prepare(claim)
	if err != nil {
		err = fmt.Errorf("claim %s not prepared: %w", name, err)
		klog.Error(err)
		return kubeletplugin.PrepareResult{Err: err}
	}
	klog.Infof("Prepared claim %s: %s", name, d.describeDevices(devs))
	return kubeletplugin.PrepareResult{Devices: devs}
}

// UnprepareResourceClaims is the kubelet's NodeUnprepareResources (kubeletplugin.DRAPlugin).
func (d *Driver) UnprepareResourceClaims(ctx context.Context, refs []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	klog.V(6).Infof("NodeUnprepareResources: %d claim(s)", len(refs))
	out := make(map[types.UID]error, len(refs))
	for _, r := range refs {
		out[r.UID] = d.unprepareOne(r)
	}
	return out, nil
}

func (d *Driver) unprepareOne(ref kubeletplugin.NamespacedObject) error {
	d.oneAtATime.Lock()
	defer d.oneAtATime.Unlock()
	held, known, err := d.prep.Unprepare(ref)
	switch {
	case err != nil:
		err = fmt.Errorf("claim %s not unprepared: %w", ref.String(), err)
		klog.Error(err)
		return err
	case !known:
		klog.Infof("Claim %s was not prepared on this node: nothing to unprepare", ref.String())
		return nil
	}
	names := make([]string, 0, len(held))
	for _, h := range held {
		names = append(names, fmt.Sprintf("%s (%s)", h.DeviceName, h.UUID))
	}
	klog.Infof("Unprepared claim %s, which held [%s]", ref.String(), strings.Join(names, ", "))
	return nil
}

// HandleError (kubeletplugin.DRAPlugin) gets the errors met in the background, such as a
// failed ResourceSlice update: logged through runtime.HandleErrorWithContext, as the
// interface's documentation recommends; none of them stops the plugin.
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
