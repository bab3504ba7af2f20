package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cacheqos/cacheqos/internal/protocol"
	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// probeTimeout bounds one engine probe (readiness, version).
const probeTimeout = time.Second

// Handler serves /metrics (the registry given in Options), /healthz (Healthy: the process can
// go on serving; failing, it asks for a restart) and /readyz (Ready).
func (p *Proxy) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(p.opts.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := p.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := p.Ready(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Ready reports nil when the proxy can serve: its client listener (and, when tenants span
// nodes, its peer listener) is accepting, a tenant table is loaded, and every local engine
// answers on its socket. Otherwise the error lists every problem.
func (p *Proxy) Ready(ctx context.Context) error {
	var errs []error
	if p.clientListeners.Load() == 0 {
		errs = append(errs, errors.New("no client listener is serving"))
	}
	if p.conf.Load().multiNode && p.peerListeners.Load() == 0 {
		errs = append(errs, errors.New("tenants span nodes but no peer listener is serving"))
	}
	if !p.loaded.Load() {
		errs = append(errs, errors.New("no tenant table loaded yet"))
	}
	tenants := *p.tenants.Load()
	ids := make([]string, 0, len(tenants))
	for id := range tenants {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		engine := tenants[id].cfg.Load().localEngine
		if engine == "" {
			continue
		}
		if err := p.probe(ctx, engine, nil); err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: engine %s: %w", id, engine, err))
		}
	}
	return errors.Join(errs...)
}

// probe asks an engine for its version (redis: INFO server; memcached: version) and, when
// version is not nil, stores it there.
func (p *Proxy) probe(ctx context.Context, socket string, version *string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return err
	}
	defer nc.Close()
	if deadline, ok := ctx.Deadline(); ok {
		nc.SetDeadline(deadline)
	}
	br := bufio.NewReader(nc)
	var v string
	if p.opts.Protocol == Redis {
		v, err = probeRedis(nc, br)
	} else {
		v, err = probeMemcached(nc, br)
	}
	if err == nil && version != nil {
		*version = v
	}
	return err
}

func probeRedis(nc net.Conn, br *bufio.Reader) (string, error) {
	if _, err := nc.Write(resp.AppendCommandStrings(nil, "INFO", "server")); err != nil {
		return "", err
	}
	reply, err := resp.NewReplyReader(br, resp.ReplyLimits{}).ReadReply()
	if err != nil {
		return "", err
	}
	v, err := reply.Decode()
	if err != nil {
		return "", err
	}
	if v.IsError() || v.Type != resp.TypeBulkString && v.Type != resp.TypeVerbatim {
		return "", fmt.Errorf("INFO answered %q", protocol.TrimEOL(reply.Raw()))
	}
	for _, line := range strings.Split(string(v.Str), "\n") {
		if version, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return version, nil
		}
	}
	return "", errors.New("INFO server has no redis_version")
}

func probeMemcached(nc net.Conn, br *bufio.Reader) (string, error) {
	if _, err := nc.Write([]byte("version\r\n")); err != nil {
		return "", err
	}
	line, err := protocol.AppendLine(br, nil, maxPeerLineLen)
	if err != nil {
		return "", err
	}
	version, ok := strings.CutPrefix(string(protocol.TrimEOL(line)), "VERSION ")
	if !ok {
		return "", fmt.Errorf("version answered %q", protocol.TrimEOL(line))
	}
	return version, nil
}

// engineVersion returns the engine version for HELLO replies: Options.EngineVersion, or what a
// local engine reported (asked once, preferring t's own partition). Every partition of a node
// runs the same engine binary.
func (p *Proxy) engineVersion(t *tenant) string {
	if v := p.version.Load(); v != nil {
		return *v
	}
	engines := []string{t.cfg.Load().localEngine}
	for _, other := range *p.tenants.Load() {
		engines = append(engines, other.cfg.Load().localEngine)
	}
	for _, engine := range engines {
		var v string
		if engine != "" && p.probe(p.ctx, engine, &v) == nil {
			p.version.Store(&v)
			return v
		}
	}
	return "unknown"
}
