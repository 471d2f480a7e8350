package plugin

// The gRPC health service that the chart's startup and liveness probes ask (grpc probes on
// HEALTHCHECK_PORT, service "liveness").  Like the real plugin's (upstream
// cmd/gpu-kubelet-plugin/health.go), it says SERVING only while both of the plugin's sockets
// answer: the registration socket a GetInfo, the DRA socket an empty NodePrepareResources.
// So a plugin whose kubelet-facing servers stopped fails its probes and is restarted.

import (
	"context"
	"fmt"
	"net"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// healthcheck is the running health service and its clients of the plugin's two sockets.
type healthcheck struct {
	grpc_health_v1.UnimplementedHealthServer

	server *grpc.Server
	done   chan struct{} // closed once the server stopped serving
	helper *kubeletplugin.Helper
	conns  []*grpc.ClientConn
	reg    registerapi.RegistrationClient
	dra    drapb.DRAPluginClient
}

// startHealthcheck serves the health service on cfg.HealthcheckPort (0: any free port); a
// negative port means none, and nil is returned.
func startHealthcheck(cfg *Config, helper *kubeletplugin.Helper) (*healthcheck, error) {
	if cfg.HealthcheckPort < 0 {
		return nil, nil
	}
	h := &healthcheck{server: grpc.NewServer(), done: make(chan struct{}), helper: helper}
	for _, socket := range []string{
		filepath.Join(cfg.KubeletRegistrarDirectoryPath, DriverName+"-reg.sock"),
		filepath.Join(cfg.DriverPluginPath(), "dra.sock"),
	} {
		conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			h.closeConns()
			return nil, fmt.Errorf("health service: no client for %s: %w", socket, err)
		}
		h.conns = append(h.conns, conn)
	}
	h.reg, h.dra = registerapi.NewRegistrationClient(h.conns[0]), drapb.NewDRAPluginClient(h.conns[1])

	lis, err := net.Listen("tcp", fmt.Sprintf(":%d", cfg.HealthcheckPort))
	if err != nil {
		h.closeConns()
		return nil, fmt.Errorf("health service: cannot listen on port %d: %w", cfg.HealthcheckPort, err)
	}
	grpc_health_v1.RegisterHealthServer(h.server, h)
	klog.Infof("Health service listening on %s", lis.Addr())
	go func() {
		defer close(h.done)
		if err := h.server.Serve(lis); err != nil {
			klog.Errorf("Health service on %s ended: %v", lis.Addr(), err)
		}
	}()
	return h, nil
}

func (h *healthcheck) closeConns() {
	for _, c := range h.conns {
		c.Close()
	}
}

// Stop ends the service once the calls in flight are answered.
func (h *healthcheck) Stop() {
	if h == nil {
		return
	}
	klog.Info("Health service stopping")
	h.server.GracefulStop()
	<-h.done
	h.closeConns()
}

// Check answers a probe: SERVING when both sockets answer, else NOT_SERVING (an answer, not
// an error, so the probe fails as unhealthy rather than as unreachable).
func (h *healthcheck) Check(ctx context.Context, req *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	if s := req.GetService(); s != "" && s != "liveness" {
		return nil, status.Errorf(codes.NotFound, "no health service %q here (only \"liveness\")", s)
	}
	if err := h.socketsAnswer(ctx); err != nil {
		klog.Errorf("Health check failed: %v", err)
		return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_NOT_SERVING}, nil
	}
	klog.V(6).Infof("Health check passed; kubelet registration: %s", h.helper.RegistrationStatus())
	return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}, nil
}

func (h *healthcheck) socketsAnswer(ctx context.Context) error {
	if _, err := h.reg.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		return fmt.Errorf("registration socket, GetInfo: %w", err)
	}
	if _, err := h.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{}); err != nil {
		return fmt.Errorf("DRA socket, empty NodePrepareResources: %w", err)
	}
	return nil
}
