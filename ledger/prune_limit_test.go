package ledger

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// A retention limit (a derivation's snapshot) bounds each pass: nothing at
// or past it is pruned whatever the policy selects, 0 prunes nothing, and
// an error skips the log.
func TestRetentionLimit(t *testing.T) {
	s, _ := newTestStore(t)
	base := time.Unix(1e9, 0)
	for _, name := range []string{"snap.a", "snap.none", "snap.err", "free"} {
		fillPrune(t, mustCreateLog(t, s, name), 1500, 8, base)
	}
	limits := map[string]uint64{"snap.a": 1100, "snap.none": 0, "free": 1 << 62}
	r := NewRetention(s, []RetentionPolicy{{Log: "*", KeepEntries: 200}}, WithRetentionBatch(512),
		WithRetentionLogger(slog.New(slog.DiscardHandler)),
		WithRetentionLimit(func(log string) (uint64, error) {
			n, ok := limits[log]
			if !ok {
				return 0, errors.New("no snapshot readable")
			}
			return n, nil
		}))
	if err := r.RunOnce(context.Background()); err == nil {
		t.Error("RunOnce: no error for snap.err")
	}
	for name, want := range map[string]uint64{"snap.a": 1100, "snap.none": 0, "snap.err": 0, "free": 1300} {
		l, err := s.Log(name)
		if err != nil {
			t.Fatal(err)
		}
		if wm, err := l.PruneWatermark(); err != nil || wm != want {
			t.Errorf("%s: watermark %d, %v; want %d", name, wm, err, want)
		}
	}
}
