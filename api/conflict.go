package api

import (
	"encoding/json"
	"fmt"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/ledger"
)

// raiseConflict turns an HTTP id conflict with the log (an event reusing
// an id the log holds with different content) into an integrity alert, as
// the Kafka source does with its violations. One alert per log: later
// conflicts update it with the latest evidence.
func (s *Server) raiseConflict(c *ledger.ConflictError) {
	if s.parts.Alerts == nil || c.EarlierItem >= 0 {
		return // a conflict inside one request is the caller's mistake
	}
	details, _ := json.Marshal(map[string]any{"id": c.ID, "index": c.Index, "item": c.Item, "source": "http"})
	_, err := s.parts.Alerts.Fire(alert.LogViolation(c.Log, "id_conflict",
		fmt.Sprintf("a POST reused id %s, held at index %d, with different content", echo(c.ID), c.Index), details))
	if err != nil {
		s.log.Error("integrity alert not raised", "log", c.Log, "err", err)
	}
}
