package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/auditd/auditd/internal/buildinfo"
)

// runVersion is `auditd version` (and `auditd --version`): the module
// version, VCS revision, dirty flag and Go version the binary was built
// with, as a line or as JSON.
func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the build information as a JSON object")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: auditd version [--json]\n\nPrints the build information the Go toolchain recorded in the binary.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "auditd version: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	in := buildinfo.Read()
	if *asJSON {
		b, _ := json.MarshalIndent(in, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	fmt.Fprintln(stdout, in)
	return 0
}
