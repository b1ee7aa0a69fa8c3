package ledger

// violationKinds are the kind labels of
// auditd_ledger_integrity_violations_total the ledger counts for a log:
// the Integrity* kinds and id_conflict (an event id reused with other
// content).
var violationKinds = []string{
	IntegrityEntryMissing, IntegrityEntryCorrupt, IntegrityLeafMismatch, IntegrityTileMismatch,
	IntegrityTileMissing, IntegrityRootMismatch, IntegrityCheckpointBad, IntegrityRollback,
	IntegrityConsistencyBad, IntegrityFork, "id_conflict",
}

// initLog creates a log's counter series at 0 when the log is opened or
// created. A series that first appears at 1 is invisible to
// increase()/rate() (every sample Prometheus holds of it is 1), so a
// dashboard summing increase() would read 0 through the log's first
// integrity violation.
func (m *metrics) initLog(log string) {
	m.appended.WithLabelValues(log)
	m.duplicates.WithLabelValues(log)
	m.checkpoints.WithLabelValues(log)
	for _, k := range violationKinds {
		m.violations.WithLabelValues(log, k)
	}
}
