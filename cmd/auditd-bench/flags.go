package main

import (
	"errors"
	"flag"
	"fmt"
)

// benchFlags are the flags of the append, http and proofs modes.
type benchFlags struct {
	mode        string
	server      string
	dir         string
	log         string
	events      int
	batch       int
	payload     int
	producers   int
	logs        int
	random      bool
	storage     bool
	requests    int
	concurrency int
	jsonOut     string
	scrubRate   float64
}

// parseBenchFlags parses the flags of the append, http and proofs modes.
func parseBenchFlags(mode string, args []string) (benchFlags, error) {
	f := benchFlags{mode: mode}
	fset := flag.NewFlagSet(mode, flag.ContinueOnError)
	fset.StringVar(&f.server, "server", "", "auditd URL (http, proofs); empty starts one in-process")
	fset.StringVar(&f.dir, "data-dir", "", "data directory for an in-process ledger (default: a temporary one, removed after)")
	fset.StringVar(&f.log, "log", "bench", "log name")
	fset.IntVar(&f.events, "events", 1_000_000, "events to append (append, http; proofs: entries to load first when in-process)")
	fset.IntVar(&f.batch, "batch", 1000, "events per request")
	fset.IntVar(&f.payload, "payload", 256, "payload bytes per event")
	fset.IntVar(&f.producers, "producers", 4, "concurrent producers")
	fset.IntVar(&f.logs, "logs", 1, "logs to spread appends over (append)")
	fset.BoolVar(&f.random, "random-payload", false, "incompressible random payload bytes instead of a JSON object")
	fset.BoolVar(&f.storage, "storage", false, "append: compact afterwards and report bytes on disk per entry, by kind of key")
	fset.IntVar(&f.requests, "requests", 200_000, "proofs: inclusion proofs to request")
	fset.IntVar(&f.concurrency, "concurrency", 8, "proofs: concurrent requests")
	fset.StringVar(&f.jsonOut, "json", "", "also write the results as JSON to this file")
	fset.Float64Var(&f.scrubRate, "scrub-rate", -1, "http, proofs: run a ledger scrub back to back at this many entries/s in the started auditd (-1: no scrub; 0: unthrottled)")
	fset.Usage = func() { fmt.Fprint(fset.Output(), usage); fset.PrintDefaults() }
	if err := parseFlags(fset, args); err != nil {
		return f, err
	}
	if f.events < 1 || f.batch < 1 || f.producers < 1 || f.payload < 16 || f.logs < 1 {
		return f, usageError{errors.New("-events, -batch, -producers, -logs must be positive and -payload at least 16")}
	}
	return f, nil
}
