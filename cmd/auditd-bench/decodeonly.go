package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/auditd/auditd/ingest"
)

// runDecodeOnly is the decodeonly mode, the reference server of compare
// -mode batch: it reads each POST body, JSON-decodes its NDJSON events
// with encoding/json and answers 200 with {"size":N}, the events it has
// decoded so far. Nothing is stored. It prints "decodeonly serving
// http://ADDR" once it accepts connections.
func runDecodeOnly(args []string) error {
	fs := flag.NewFlagSet("decodeonly", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	debug := fs.String("debug-listen", "", "serve /debug/pprof on this address (off when empty)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: auditd-bench decodeonly [-listen ADDR] [-debug-listen ADDR]\n\n"+
			"The decode-only reference server of compare -mode batch (compare starts it as a child).\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return done(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *debug != "" {
		dl, err := net.Listen("tcp", *debug)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		go http.Serve(dl, mux)
		fmt.Fprintf(os.Stderr, "decodeonly profiles http://%s/debug/pprof/\n", dl.Addr())
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	var d decodeOnly
	hs := &http.Server{Handler: &d, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); hs.Close() }()
	fmt.Fprintf(os.Stderr, "decodeonly serving http://%s\n", ln.Addr())
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// decodeOnly is the decode-only handler; size counts the events decoded.
type decodeOnly struct {
	size atomic.Uint64
}

func (d *decodeOnly) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	n, err := decodeNDJSON(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	size := d.size.Add(uint64(n))
	w.Header().Set("Content-Type", "application/json")
	b := strconv.AppendUint([]byte(`{"size":`), size, 10)
	w.Write(append(b, "}\n"...))
}

// decodeNDJSON decodes every event of an NDJSON body, as auditd's decoder
// does, and returns how many there were.
func decodeNDJSON(r io.Reader) (int, error) {
	dec := json.NewDecoder(r)
	n := 0
	for {
		var ev ingest.Event // auditd's own event shape, decoded with encoding/json alone
		err := dec.Decode(&ev)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("event %d: %w", n, err)
		}
		if len(ev.Payload) == 0 && ev.PayloadBase64 == nil {
			return n, fmt.Errorf("event %d: no payload", n)
		}
		n++
	}
}
