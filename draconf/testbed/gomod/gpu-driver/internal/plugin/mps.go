package plugin

// The MPS control daemon, as upstream's MpsControlDaemon (cmd/gpu-kubelet-plugin/sharing.go
// Start, AssertReady, Stop): per MPS config group a Deployment mps-control-daemon-<id> in the
// plugin's namespace, pinned to the node, rendered from upstream's template
// (templates/mps-control-daemon.tmpl.yaml, copied verbatim from NVIDIA/k8s-dra-driver-gpu at
// v0.4.0, commit 6910a2bea298933cf64cfb061ddf88b6e17743ff: the mirror holds no v0.4.1 tag; the
// file is the same shape v0.4.1 ships), created through the API server with the plugin's
// ServiceAccount, waited for before prepare returns and deleted on unprepare.
//
// What differs, and why: the template is embedded (upstream reads /templates/... from its
// image; the bed's plugin image holds only the binary); the image is IMAGE_NAME, which the bed
// sets to its busybox image, as the plugin's image has no shell for the template's script;
// the bed's driver root has no shell either, so the script takes upstream's "no shell in
// driver root" path and runs the driver root's nvidia-cuda-mps-control, which on the bed is the
// stand-in (cmd/nvidia-cuda-mps-control): the only simulated part.  The shm directory is not
// mounted as a tmpfs (a plain directory).  Under the mps-daemon-fails fault the container gets
// NVIDIA_SIM_MPS_DAEMON=fail, so the stand-in's `-d` fails and the container exits at once.

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"draconf.local/testbed/gpu-driver/internal/mpscontrol"
)

//go:embed templates/mps-control-daemon.tmpl.yaml
var mpsControlDaemonTemplate string

const (
	// MpsControlDaemonNameFmt is upstream's: filled with the daemon id (claim UID and hash).
	MpsControlDaemonNameFmt = "mps-control-daemon-%v"
	// MpsDefaultShmMountPath is upstream's shm mount path when the driver root has no dev/shm.
	MpsDefaultShmMountPath = "/dev/shm"
)

// mpsTemplateData is upstream's MpsControlDaemonTemplateData.
type mpsTemplateData struct {
	NodeName                        string
	MpsControlDaemonNamespace       string
	MpsControlDaemonName            string
	CUDA_VISIBLE_DEVICES            string //nolint:stylecheck // the template's field name
	DefaultActiveThreadPercentage   string
	DefaultPinnedDeviceMemoryLimits map[string]string
	NvidiaDriverRoot                string
	MpsShmDirectory                 string
	MpsPipeDirectory                string
	MpsLogDirectory                 string
	MpsImageName                    string
	FeatureGates                    map[string]bool
	MpsShmMountPath                 string
}

// mpsReadyBackoff is upstream AssertReady's: 4 tries over about 7 to 15 s.  A daemon not ready
// by then fails this prepare; the kubelet retries, finding the Deployment already created.
var mpsReadyBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 1, Steps: 4, Cap: 10 * time.Second}

func mpsDaemonName(id string) string { return fmt.Sprintf(MpsControlDaemonNameFmt, id) }

// shmMountPath is upstream's setMpsShmMountPath: in the driver root's dev/shm when the daemon
// would run chrooted there, else /dev/shm.
func (m *sharingManager) shmMountPath() string {
	if _, err := os.Stat(filepath.Join(m.containerDriverRoot, "dev", "shm")); err == nil {
		return filepath.Join("/driver-root", "dev", "shm")
	}
	return MpsDefaultShmMountPath
}

// mpsDeployment renders upstream's template for the daemon id.
func (m *sharingManager) mpsDeployment(id string, uuids []string, activeThreads string, limits map[string]string) (*appsv1.Deployment, error) {
	_, pipe, shm, logDir := m.mpsDirs(id)
	data := mpsTemplateData{
		NodeName:                        m.nodeName,
		MpsControlDaemonNamespace:       m.namespace,
		MpsControlDaemonName:            mpsDaemonName(id),
		CUDA_VISIBLE_DEVICES:            strings.Join(uuids, ","),
		DefaultActiveThreadPercentage:   activeThreads,
		DefaultPinnedDeviceMemoryLimits: limits,
		NvidiaDriverRoot:                m.hostDriverRoot,
		MpsShmDirectory:                 shm,
		MpsPipeDirectory:                pipe,
		MpsLogDirectory:                 logDir,
		MpsImageName:                    m.imageName,
		FeatureGates:                    m.gates,
		MpsShmMountPath:                 m.shmMountPath(),
	}
	tmpl, err := template.New("mps-control-daemon.tmpl.yaml").Parse(mpsControlDaemonTemplate)
	if err != nil {
		return nil, fmt.Errorf("failed to parse template file: %w", err)
	}
	var rendered bytes.Buffer
	if err := tmpl.Execute(&rendered, data); err != nil {
		return nil, fmt.Errorf("failed to execute template: %w", err)
	}
	var d appsv1.Deployment
	if err := yaml.Unmarshal(rendered.Bytes(), &d); err != nil {
		return nil, fmt.Errorf("failed to unmarshal yaml: %w", err)
	}
	if m.faults.Has(FaultMpsDaemonFails) && len(d.Spec.Template.Spec.Containers) > 0 {
		c := &d.Spec.Template.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: mpscontrol.FaultEnv, Value: "fail"})
	}
	return &d, nil
}

// daemonStarted is upstream's IsControlDaemonStarted.
func (m *sharingManager) daemonStarted(ctx context.Context, id string) (bool, error) {
	_, err := m.client.AppsV1().Deployments(m.namespace).Get(ctx, mpsDaemonName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("failed to get deployment: %w", err)
	}
	return true, nil
}

// createMpsDaemon is the Deployment half of upstream's Start (directories and compute mode are
// done by the caller, in upstream's order).
func (m *sharingManager) createMpsDaemon(ctx context.Context, d *appsv1.Deployment) error {
	_, err := m.client.AppsV1().Deployments(m.namespace).Create(ctx, d, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to create deployment: %w", err)
	}
	return nil
}

// assertMpsReady is upstream's AssertReady, word for word in its errors: one ready replica,
// exactly one pod, whose one container is ready (the template's startup probe: the script
// got past `nvidia-cuda-mps-control -d` and the settings).
func (m *sharingManager) assertMpsReady(ctx context.Context, id string) error {
	name := mpsDaemonName(id)
	return retry.OnError(m.readyBackoff, func(error) bool { return true }, func() error {
		deployment, err := m.client.AppsV1().Deployments(m.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("failed to get deployment: %w", err)
		}
		if deployment.Status.ReadyReplicas != 1 {
			return fmt.Errorf("waiting for MPS control daemon to come online")
		}
		selector := deployment.Spec.Selector.MatchLabels
		pods, err := m.client.CoreV1().Pods(m.namespace).List(ctx, metav1.ListOptions{
			LabelSelector: labels.Set(selector).AsSelector().String(),
		})
		if err != nil {
			return fmt.Errorf("error listing pods from deployment")
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("unexpected number of pods in deployment: %v", len(pods.Items))
		}
		if len(pods.Items[0].Status.ContainerStatuses) != 1 {
			return fmt.Errorf("unexpected number of container statuses in pod")
		}
		if !pods.Items[0].Status.ContainerStatuses[0].Ready {
			return fmt.Errorf("control daemon not yet ready")
		}
		return nil
	})
}

// deleteMpsDaemon is the Deployment half of upstream's Stop (foreground: the pod goes first).
func (m *sharingManager) deleteMpsDaemon(ctx context.Context, id string) error {
	policy := metav1.DeletePropagationForeground
	err := m.client.AppsV1().Deployments(m.namespace).Delete(ctx, mpsDaemonName(id), metav1.DeleteOptions{PropagationPolicy: &policy})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to delete deployment: %w", err)
	}
	klog.V(4).Infof("Deleted deployment %s/%s", m.namespace, mpsDaemonName(id))
	return nil
}
