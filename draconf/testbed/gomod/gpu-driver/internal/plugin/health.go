package plugin

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path"
	"strconv"
	"sync"

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

// healthcheck is upstream's gRPC health service (cmd/gpu-kubelet-plugin/health.go), which the
// chart's startup and liveness probes query (grpc port HEALTHCHECK_PORT, service
// "liveness"): serving when the registration socket answers GetInfo and the DRA socket
// answers an empty NodePrepareResources.
type healthcheck struct {
	grpc_health_v1.UnimplementedHealthServer

	server    *grpc.Server
	wg        sync.WaitGroup
	kphelper  *kubeletplugin.Helper
	regClient registerapi.RegistrationClient
	draClient drapb.DRAPluginClient
	conns     []*grpc.ClientConn
}

func startHealthcheck(cfg *Config, helper *kubeletplugin.Helper) (*healthcheck, error) {
	port := cfg.HealthcheckPort
	if port < 0 {
		return nil, nil
	}
	addr := net.JoinHostPort("", strconv.Itoa(port))
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("failed to listen for healthcheck service at %s: %w", addr, err)
	}
	regSock := (&url.URL{Scheme: "unix", Path: path.Join(cfg.KubeletRegistrarDirectoryPath, DriverName+"-reg.sock")}).String()
	regConn, err := grpc.NewClient(regSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("connect to registration socket: %w", err)
	}
	draSock := (&url.URL{Scheme: "unix", Path: path.Join(cfg.DriverPluginPath(), "dra.sock")}).String()
	draConn, err := grpc.NewClient(draSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		lis.Close()
		regConn.Close()
		return nil, fmt.Errorf("connect to DRA socket: %w", err)
	}
	h := &healthcheck{
		server:    grpc.NewServer(),
		kphelper:  helper,
		regClient: registerapi.NewRegistrationClient(regConn),
		draClient: drapb.NewDRAPluginClient(draConn),
		conns:     []*grpc.ClientConn{regConn, draConn},
	}
	grpc_health_v1.RegisterHealthServer(h.server, h)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		klog.Infof("starting healthcheck service at %s", lis.Addr().String())
		if err := h.server.Serve(lis); err != nil {
			klog.Errorf("failed to serve healthcheck service on %s: %v", addr, err)
		}
	}()
	return h, nil
}

func (h *healthcheck) Stop() {
	if h == nil {
		return
	}
	klog.Info("Stopping healthcheck service")
	h.server.GracefulStop()
	h.wg.Wait()
	for _, c := range h.conns {
		c.Close()
	}
}

// Check implements grpc_health_v1.HealthServer.
func (h *healthcheck) Check(ctx context.Context, req *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	if s := req.GetService(); s != "" && s != "liveness" {
		return nil, status.Error(codes.NotFound, "unknown service")
	}
	resp := &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_NOT_SERVING}
	if _, err := h.regClient.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		klog.ErrorS(err, "failed to call GetInfo")
		return resp, nil
	}
	if _, err := h.draClient.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{}); err != nil {
		klog.ErrorS(err, "failed to call NodePrepareResources")
		return resp, nil
	}
	klog.V(6).Infof("Current kubelet plugin registration status: %s", h.kphelper.RegistrationStatus())
	resp.Status = grpc_health_v1.HealthCheckResponse_SERVING
	return resp, nil
}
