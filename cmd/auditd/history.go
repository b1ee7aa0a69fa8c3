package main

import (
	"context"
	"strings"
	"time"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/internal/buildinfo"
)

// describe gives the API what the status page shows of the daemon: its
// build, origin and start (GET /v1/info) and its recent history (GET
// /v1/history), sampled until the daemon stops.
func (d *instance) describe(srv *api.Server, in buildinfo.Info) {
	origin, _, _ := strings.Cut(d.key.vkey, "+")
	srv.SetInfo(api.Info{Version: in.Version, Revision: in.Revision, Dirty: in.Dirty, GoVersion: in.GoVersion,
		Origin: origin, StartedAt: d.started})
	every := d.cfg.HistoryInterval
	if every <= 0 {
		every = 10 * time.Second
	}
	h := api.NewHistory(d.store, d.opts.Components.Derivations, every, 360, 50)
	srv.SetHistory(h)
	ctx, cancel := context.WithCancel(d.ctx)
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx) }()
	d.onStop("", func() { cancel(); <-done })
}
