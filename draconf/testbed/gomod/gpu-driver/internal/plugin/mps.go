package plugin

// The MPS control daemon of one MPS config group.  The NVIDIA driver runs it as a Deployment
// of one pod in the plugin's own namespace, named mps-control-daemon-<daemon id> and pinned to
// the node by nodeName, which the plugin creates through the API server with its
// ServiceAccount, waits for before prepare returns and deletes on unprepare (upstream
// cmd/gpu-kubelet-plugin/sharing.go, MpsControlDaemon, and the Deployment of its
// templates/mps-control-daemon.tmpl.yaml).  The simulated plugin does the same, with a
// Deployment built here holding only what the bed's daemon needs:
//
//   - the image IMAGE_NAME: on the bed its busybox, whose sh runs the script; the container is
//     privileged, as the real daemon's is, so a cluster policy against privileged pods in the
//     driver's namespace meets it on the bed too;
//   - the host driver root at /driver-root: the script runs the driver's
//     nvidia-cuda-mps-control from there, which on the bed is the stand-in
//     (internal/mpscontrol) and the only simulated part;
//   - the daemon's pipe, log and shm directories (<plugin dir>/mps/<id>/{pipe,log,shm}) at
//     /mps/pipe, /mps/log and /dev/shm, with CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY
//     naming the first two and CUDA_VISIBLE_DEVICES the group's GPUs;
//   - a script (daemonScript) that starts the daemon, pipes it the config's settings, leaves a
//     mark, then follows control.log; a startup probe that waits for the mark, so the
//     container is ready only once the daemon took its settings.
//
// The shm directory is a plain directory, not a tmpfs.  Under the mps-daemon-fails fault the
// container also gets NVIDIA_SIM_MPS_DAEMON=fail: the stand-in's -d fails, the script stops
// there and the container never becomes ready.

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"draconf.local/testbed/gpu-driver/internal/mpscontrol"
)

// MpsDaemonPrefix begins the name of every MPS control daemon Deployment (the real driver's
// names start so too; draconf/sharing.py finds a claim's daemon by it and the claim's UID).
const MpsDaemonPrefix = "mps-control-daemon-"

// Where the daemon's container has what it needs.
const (
	daemonContainer  = "mps-control-daemon"
	daemonDriverRoot = "/driver-root"
	daemonPipeDir    = "/mps/pipe"
	daemonLogDir     = "/mps/log"
	daemonShmDir     = "/dev/shm"
	// daemonBinary is the driver's MPS control binary, where the bed installs it.
	daemonBinary = daemonDriverRoot + "/usr/bin/nvidia-cuda-mps-control"
	// daemonStartedMark is left by the script once the daemon took its settings.
	daemonStartedMark = daemonLogDir + "/draconf-started"
)

// mpsReadyBackoff paces the wait for a new daemon: 4 looks over about 7 to 15 s, about as
// long as the real driver gives it.  A daemon not ready by then fails this prepare; the
// kubelet's retry finds the Deployment already there and waits again.
var mpsReadyBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 1, Steps: 4, Cap: 10 * time.Second}

func mpsDaemonName(id string) string { return MpsDaemonPrefix + id }

// mpsSettings are the control commands the daemon is given for config, in a stable order:
// the active thread percentage, then each GPU's pinned memory limit, by UUID.
func mpsSettings(config *MpsConfig, uuids []string) ([]string, error) {
	if config == nil {
		return nil, nil
	}
	var out []string
	if p := config.DefaultActiveThreadPercentage; p != nil {
		out = append(out, fmt.Sprintf("set_default_active_thread_percentage %d", *p))
	}
	limits, err := config.pinnedLimits(uuids)
	if err != nil {
		return nil, err
	}
	gpus := make([]string, 0, len(limits))
	for u := range limits {
		gpus = append(gpus, u)
	}
	slices.Sort(gpus)
	for _, u := range gpus {
		out = append(out, fmt.Sprintf("set_default_device_pinned_mem_limit %s %s", u, limits[u]))
	}
	return out, nil
}

// daemonScript is what the daemon's container runs: any failing step ends it, and the
// container with it, before the mark the startup probe waits for.
func daemonScript(settings []string) string {
	lines := []string{
		"set -e",
		"rm -f " + daemonStartedMark,
		daemonBinary + " -d",
	}
	for _, s := range settings {
		lines = append(lines, fmt.Sprintf("echo '%s' | %s", s, daemonBinary))
	}
	return strings.Join(append(lines,
		"touch "+daemonStartedMark,
		"exec tail -n +1 -f "+path.Join(daemonLogDir, "control.log"),
	), "\n")
}

// daemonDeployment is the Deployment of the daemon id for these GPUs and settings.
func (m *sharingManager) daemonDeployment(id string, uuids, settings []string) *appsv1.Deployment {
	name := mpsDaemonName(id)
	podLabels := map[string]string{"app.kubernetes.io/name": daemonContainer, "app.kubernetes.io/instance": name}
	_, pipe, shm, logDir := m.mpsDirs(id)
	hostDir := func(volume, dir string) corev1.Volume {
		return corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}}
	}
	env := []corev1.EnvVar{
		{Name: "CUDA_VISIBLE_DEVICES", Value: strings.Join(uuids, ",")},
		{Name: "CUDA_MPS_PIPE_DIRECTORY", Value: daemonPipeDir},
		{Name: "CUDA_MPS_LOG_DIRECTORY", Value: daemonLogDir},
	}
	if m.faults.Has(FaultMpsDaemonFails) {
		env = append(env, corev1.EnvVar{Name: mpscontrol.FaultEnv, Value: "fail"})
	}
	container := corev1.Container{
		Name:            daemonContainer,
		Image:           m.imageName,
		Command:         []string{"sh", "-c", daemonScript(settings)},
		Env:             env,
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "driver-root", MountPath: daemonDriverRoot, ReadOnly: true},
			{Name: "mps-pipe", MountPath: daemonPipeDir},
			{Name: "mps-log", MountPath: daemonLogDir},
			{Name: "mps-shm", MountPath: daemonShmDir},
		},
		// Up to 30 s for the script to reach its mark: the bed's nodes may be busy.
		StartupProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", daemonStartedMark}}},
			PeriodSeconds:    1,
			FailureThreshold: 30,
		},
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.namespace, Labels: podLabels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: podLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					NodeName:   m.nodeName,
					Containers: []corev1.Container{container},
					Volumes: []corev1.Volume{
						hostDir("driver-root", m.hostDriverRoot),
						hostDir("mps-pipe", pipe),
						hostDir("mps-log", logDir),
						hostDir("mps-shm", shm),
					},
				},
			},
		},
	}
}

// daemonExists reports whether the daemon's Deployment is there (a prepare retried after its
// wait timed out finds it).
func (m *sharingManager) daemonExists(ctx context.Context, id string) (bool, error) {
	_, err := m.client.AppsV1().Deployments(m.namespace).Get(ctx, mpsDaemonName(id), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading Deployment %s/%s: %w", m.namespace, mpsDaemonName(id), err)
	}
	return true, nil
}

// createDaemon creates the daemon's Deployment; one created meanwhile is as good.
func (m *sharingManager) createDaemon(ctx context.Context, d *appsv1.Deployment) error {
	_, err := m.client.AppsV1().Deployments(m.namespace).Create(ctx, d, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	return nil
}

// waitDaemonReady waits, paced by m.readyBackoff, until the daemon's Deployment counts its pod
// ready.  Not ready by then: an error that says so and what was seen last.
func (m *sharingManager) waitDaemonReady(ctx context.Context, id string) error {
	name := mpsDaemonName(id)
	seen := "nothing read yet"
	err := wait.ExponentialBackoffWithContext(ctx, m.readyBackoff, func(ctx context.Context) (bool, error) {
		d, err := m.client.AppsV1().Deployments(m.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			seen = fmt.Sprintf("its Deployment could not be read: %v", err)
			return false, nil
		}
		if d.Status.ReadyReplicas > 0 {
			return true, nil
		}
		seen = m.daemonPodState(ctx, d)
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("MPS control daemon %s is not ready after %d checks: %s", name, m.readyBackoff.Steps, seen)
	}
	return nil
}

// daemonPodState says why a daemon's Deployment has no ready pod, as far as its pod shows.
func (m *sharingManager) daemonPodState(ctx context.Context, d *appsv1.Deployment) string {
	pods, err := m.client.CoreV1().Pods(m.namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set(d.Spec.Selector.MatchLabels).String()})
	if err != nil || len(pods.Items) == 0 {
		return "its Deployment has no ready replica and no pod yet"
	}
	p := pods.Items[0]
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			return fmt.Sprintf("pod %s: container %s waiting (%s)", p.Name, c.Name, c.State.Waiting.Reason)
		case c.State.Terminated != nil:
			return fmt.Sprintf("pod %s: container %s exited %d", p.Name, c.Name, c.State.Terminated.ExitCode)
		case !c.Ready:
			return fmt.Sprintf("pod %s: container %s runs, not ready yet", p.Name, c.Name)
		}
	}
	return fmt.Sprintf("pod %s is %s, not ready", p.Name, p.Status.Phase)
}

// deleteDaemon deletes the daemon's Deployment, its pod first (foreground); gone already is
// fine.
func (m *sharingManager) deleteDaemon(ctx context.Context, id string) error {
	name := mpsDaemonName(id)
	err := m.client.AppsV1().Deployments(m.namespace).Delete(ctx, name,
		metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Deployment %s/%s: %w", m.namespace, name, err)
	}
	klog.V(4).Infof("MPS control daemon %s/%s: Deployment deleted", m.namespace, name)
	return nil
}
