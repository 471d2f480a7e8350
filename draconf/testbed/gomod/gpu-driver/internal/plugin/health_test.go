package plugin

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// With neither of the plugin's sockets there, the service answers NOT_SERVING; an unknown
// service is NotFound; a negative port starts nothing.
func TestHealthcheckWithoutSockets(t *testing.T) {
	dir := t.TempDir()
	cfg := &Config{HealthcheckPort: 0, KubeletRegistrarDirectoryPath: dir, KubeletPluginsDirectoryPath: dir}
	h, err := startHealthcheck(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := h.Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: "liveness"})
	if err != nil || resp.Status != grpc_health_v1.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("liveness: %v, %v", resp, err)
	}
	if _, err := h.Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: "readiness"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown service: %v", err)
	}
	cfg.HealthcheckPort = -1
	if off, err := startHealthcheck(cfg, nil); off != nil || err != nil {
		t.Fatalf("negative port: %v, %v", off, err)
	}
}
